"""The ``ctxd`` command: ``serve`` and admin verbs.

Configuration problems (a bad value, an unknown key, a missing file) print
one line naming the setting and exit 2; so do a plugin that cannot load and
a sidecar that cannot start (address in use, store that cannot be opened).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

# gRPC's C core writes its own lines (not JSON) to stderr; it reads this once,
# when grpc is first imported, so it is set before anything imports grpc.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from ctxd_sidecar import __version__, config  # noqa: E402
from ctxd_sidecar.config.loader import load_config  # noqa: E402
from ctxd_sidecar.server import logs  # noqa: E402

log = logging.getLogger("ctxd")

#: Shown by ``ctxd --help`` (plain text: argparse prints it verbatim).
DESCRIPTION = "ctxd: durable context and memory for LLM agent runtimes, over gRPC."


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ctxd", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"ctxd {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the sidecar")
    serve.add_argument("--config", help="TOML config file (also CTXD_CONFIG)")
    serve.add_argument("--listen", help="host:port or unix:PATH (default 127.0.0.1:50051)")
    serve.add_argument("--store", help="store URI (default lmdb://ctxd-data)")
    serve.add_argument("--instance", help="instance namespace (default 'default')")
    serve.add_argument("--metrics-listen", help="Prometheus endpoint host:port")
    serve.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR")
    serve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any setting by dotted name, e.g. memory.max_keys=500 (repeatable)",
    )

    plugins = sub.add_parser(
        "plugins",
        help="list plugins: store schemes, summarisers and config tables, each with its plugin",
    )
    plugins.add_argument("--config", help="TOML config file (also CTXD_CONFIG)")

    migrate = sub.add_parser(
        "migrate",
        help="copy contexts and memory from one store to another (stop the sidecars first)",
    )
    migrate.add_argument("--from", dest="source", required=True, metavar="URI", help="source store")
    migrate.add_argument(
        "--to", dest="target", required=True, metavar="URI", help="destination store"
    )
    migrate.add_argument("--config", help="TOML config file (for prefix and instance)")
    migrate.add_argument("--instance", help="instance namespace to copy (default from config)")
    migrate.add_argument(
        "--overwrite", action="store_true", help="replace keys the destination holds differently"
    )
    migrate.add_argument(
        "--dry-run", action="store_true", help="count what would be copied; write nothing"
    )
    migrate.add_argument("--no-progress", action="store_true", help="no progress display on stderr")

    from ctxd_sidecar.admin import register

    register(sub)
    # `ctxd ui` parses its own flags (ctxd_sidecar/ui/cli.py: a bad one is one line).
    ui = sub.add_parser(
        "ui", help="a read-only web page over a sidecar (the ui extra)", add_help=False
    )
    ui.add_argument("rest", nargs=argparse.REMAINDER)
    return p


async def _migrate(cfg: config.Config, args: argparse.Namespace, pm) -> int:
    import json

    from ctxd_sidecar.admin.progress import Progress, dry_target, require_source
    from ctxd_sidecar.core.errors import CtxdError
    from ctxd_sidecar.server.composition import migration

    target = dry_target(args.target) if args.dry_run else args.target
    require_source(args.source)
    run = await migration(
        cfg,
        pm,
        args.source,
        target,
        overwrite=args.overwrite,
        dry_run=args.dry_run,
        progress=None if args.no_progress else Progress(),
    )
    try:
        report = await run.run()
    except CtxdError as exc:
        print(f"ctxd migrate: {exc.message}", file=sys.stderr)
        return 1
    finally:
        await run.src.close()
        await run.dst.close()
    print(json.dumps(report.to_dict(), indent=2))
    return 0 if report.ok else 1


def _overrides(args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    for name in ("listen", "store", "instance", "metrics_listen", "log_level"):
        value = getattr(args, name)
        if value is not None:
            out[name] = value
    return out


def _fail(message: str) -> int:
    for handler in logging.getLogger().handlers:
        handler.flush()  # lines logged before come first
    print(f"ctxd: {' '.join(message.split())}", file=sys.stderr)
    return 2


def _plugin_manager():
    """The plugin manager, or ValueError: a plugin that fails to import or
    implements a hook that does not exist is one line, not a traceback."""
    import pluggy

    from ctxd_sidecar.plugin.manager import plugin_manager

    try:
        return plugin_manager()
    except (ImportError, pluggy.PluginValidationError) as exc:
        raise ValueError(f"cannot load plugins: {exc}") from None


def _print_plugins(cfg: config.Config, pm) -> None:
    from ctxd_sidecar.plugin.manager import (
        available_schemes,
        each_result,
        scheme_owners,
        summariser_owners,
    )

    def line(key: str, owners: list[str]) -> str:
        over = f" (overrides {', '.join(owners[:-1])})" if len(owners) > 1 else ""
        return f"  {key}: {owners[-1]}{over}"

    print("stores (scheme: plugin)")
    for scheme, owners in scheme_owners(pm).items():
        print(line(scheme, owners))
    print("summarisers (name: plugin)")
    offers = summariser_owners(cfg, pm)
    for name, offered in offers.items():
        print(line(name, [owner for owner, _ in offered]))
    offering = {owner for offered in offers.values() for owner, _ in offered}
    idle = [owner for owner, _ in each_result(pm, "ctxd_summarisers", config=cfg)]
    for owner in dict.fromkeys(o for o in idle if o not in offering):
        print(f"  (none from {owner} with this configuration)")
    print("config tables (table: plugin)")
    owners: dict[str, list[str]] = {}
    for owner, tables in each_result(pm, "ctxd_config_tables"):
        for table in tables or ():
            owners.setdefault(table.name, []).append(owner)
    for name in sorted(owners):
        print(line(name, owners[name]))
    print("schemes:", ", ".join(available_schemes(pm)))


def _log_warnings(cfg: config.Config) -> None:
    for warning in cfg.warnings:
        log.warning(warning)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader left (``ctxd plugins | head``): no traceback, and nothing more to
        # flush into the closed pipe at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ui"]:
        from ctxd_sidecar.ui.cli import main as ui_main

        return ui_main(argv[1:])
    args = _parser().parse_args(argv)
    from ctxd_sidecar.admin import VERBS

    if args.command in VERBS:
        from ctxd_sidecar.admin import run as run_admin

        return run_admin(args)
    try:
        pm = _plugin_manager()
        if args.command == "plugins":
            cfg = load_config(config_file=args.config, plugins=pm)
        elif args.command == "migrate":
            overrides = {"instance": args.instance} if args.instance else {}
            cfg = load_config(config_file=args.config, overrides=overrides, plugins=pm)
        else:
            cfg = load_config(config_file=args.config, overrides=_overrides(args), plugins=pm)
    except ValueError as exc:
        return _fail(f"configuration error: {exc}")

    if args.command == "plugins":
        try:
            _print_plugins(cfg, pm)
        except ValueError as exc:
            return _fail(str(exc))
        return 0

    if args.command == "migrate":
        logs.setup("WARNING", "text")
        _log_warnings(cfg)
        try:
            return asyncio.run(_migrate(cfg, args, pm))
        except ValueError as exc:
            print(f"ctxd migrate: {exc}", file=sys.stderr)
            return 2

    logs.setup(cfg.log_level, cfg.log_format)
    _log_warnings(cfg)

    from ctxd_sidecar.server.app import StartupError, run

    try:
        return asyncio.run(run(cfg))
    except (StartupError, ValueError) as exc:
        return _fail(f"cannot start: {exc}")
    except OSError as exc:
        return _fail(f"cannot start: {exc.strerror or exc}")
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
