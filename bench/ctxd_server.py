"""A real ctxd for benchmarks: ``python -m bench.ctxd_server --store URI [--set K=V]``.

Runs the same ``Sidecar`` that ``ctxd serve`` runs on an ephemeral loopback
port, prints the port on its first line (what ``bench.procs.spawn`` waits
for) and stops when its stdin closes, so it never outlives the bench.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading


def serve(argv: list[str]) -> int:
    """Run a real ctxd on an ephemeral port; print the port; stop on stdin EOF."""
    ap = argparse.ArgumentParser(prog="python -m bench.ctxd_server")
    ap.add_argument("--store", required=True)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)

    from ctxd_sidecar.config.loader import load_config
    from ctxd_sidecar.server import logs
    from ctxd_sidecar.server.app import Sidecar, settle_heap

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    overrides = dict(item.split("=", 1) for item in args.set)
    overrides |= {"store": args.store, "listen": "127.0.0.1:0"}
    cfg = load_config(env={}, overrides=overrides)
    logs.setup("WARNING", "text")

    async def main() -> None:
        sidecar = Sidecar(cfg)
        address = await sidecar.start()
        settle_heap()  # as ``ctxd serve`` does
        print(address.rsplit(":", 1)[1], flush=True)
        loop = asyncio.get_running_loop()
        eof = asyncio.Event()

        def wait_eof() -> None:
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            except (OSError, ValueError):
                pass
            loop.call_soon_threadsafe(eof.set)

        threading.Thread(target=wait_eof, daemon=True).start()
        await eof.wait()
        await sidecar.stop(grace=1)

    asyncio.run(main())
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
