"""``ctxd ui --address SIDECAR --listen 127.0.0.1:PORT``: parse, connect, serve.

A bad flag is one line on stderr and exit 2; the page listens on loopback
unless told otherwise, with a warning when it is not."""

from __future__ import annotations

import argparse
import ipaddress
import sys

from ctxd_sidecar.admin.connect import AdminError, add_connection_flags, target

DEFAULT_LISTEN = "127.0.0.1:8765"


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="ctxd ui",
        description="A read-only web page over a sidecar: conversations, compactions, memory.",
    )
    p.add_argument(
        "--listen", default=DEFAULT_LISTEN, help=f"host:port to serve on (default {DEFAULT_LISTEN})"
    )
    p.add_argument("--log-level", default="warning", help="uvicorn's log level (default warning)")
    add_connection_flags(p)
    return p


def split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen expects host:port, got {listen!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str]) -> int:
    try:
        args = parser().parse_args(argv)
        host, port = split_listen(args.listen)
        tgt = target(args)
    except UsageError as exc:
        print(f"ctxd ui: {exc}", file=sys.stderr)
        return 2
    except AdminError as exc:
        print(f"ctxd ui: {exc.message}", file=sys.stderr)
        return exc.code
    try:
        import uvicorn

        from ctxd_sidecar.ui.app import create_app
    except ImportError as exc:
        print(
            f"ctxd ui: needs the ui extra (pip install '.[ui]' in the clone): {exc}",
            file=sys.stderr,
        )
        return 2
    if not is_loopback(host):
        print(
            f"ctxd ui: warning: listening on {host}, not loopback: anyone who can reach "
            "this address can read every conversation and memory key (there is no login)",
            file=sys.stderr,
        )
    print(f"ctxd ui: http://{args.listen} reading {tgt.address}", file=sys.stderr, flush=True)
    config = uvicorn.Config(
        create_app(tgt),
        host=host,
        port=port,
        log_level=args.log_level.lower(),
        access_log=False,
        server_header=False,
    )
    try:
        uvicorn.Server(config).run()
    except KeyboardInterrupt:
        pass
    return 0
