"""The ``ctxd`` command: ``serve`` and admin verbs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from sidecar import __version__, config, logs

log = logging.getLogger("ctxd")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ctxd", description=__doc__)
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

    sub.add_parser("plugins", help="list installed store plugins and their URI schemes")

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
    return p


async def _migrate(cfg, args) -> int:
    import json

    from sidecar.core.errors import CtxdError
    from sidecar.core.migrate import Migration
    from sidecar.core.storage import Storage
    from sidecar.plugins import open_store, plugin_manager

    pm = plugin_manager()
    src = Storage(
        await asyncio.to_thread(open_store, args.source, pm),
        prefix=cfg.prefix,
        instance=cfg.instance,
    )
    dst = Storage(
        await asyncio.to_thread(open_store, args.target, pm),
        prefix=cfg.prefix,
        instance=cfg.instance,
    )
    try:
        report = await Migration(
            src, dst, overwrite=args.overwrite, idem_cap=cfg.contexts.idempotency_keys
        ).run()
    except CtxdError as exc:
        print(f"ctxd migrate: {exc.message}", file=sys.stderr)
        return 1
    finally:
        await src.close()
        await dst.close()
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "plugins":
        from sidecar.plugins import available_schemes, plugin_manager

        pm = plugin_manager()
        for name, plugin in pm.list_name_plugin():
            print(f"{name}: {getattr(plugin, '__name__', plugin)}")
        print("schemes:", ", ".join(available_schemes(pm)))
        return 0

    if args.command == "migrate":
        try:
            overrides = {"instance": args.instance} if args.instance else {}
            cfg = config.load(config_file=args.config, overrides=overrides)
        except ValueError as exc:
            print(f"ctxd: configuration error: {exc}", file=sys.stderr)
            return 2
        logs.setup("WARNING", "text")
        try:
            return asyncio.run(_migrate(cfg, args))
        except ValueError as exc:
            print(f"ctxd migrate: {exc}", file=sys.stderr)
            return 2

    try:
        cfg = config.load(config_file=args.config, overrides=_overrides(args))
    except ValueError as exc:
        print(f"ctxd: configuration error: {exc}", file=sys.stderr)
        return 2
    logs.setup(cfg.log_level, cfg.log_format)

    from sidecar.server.app import run

    try:
        return asyncio.run(run(cfg))
    except (ValueError, OSError) as exc:
        log.error("cannot start", extra={"error": str(exc)})
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
