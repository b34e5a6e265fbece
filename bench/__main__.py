"""Command-line entry point: ``python -m bench [--quick] [--json PATH] [--only G,...]``.

Imports the suite modules listed in ``SUITE_MODULES`` (each registers its
groups with ``bench.harness.register``), runs the selected groups, prints
the table and writes the JSON report. Exit status is non-zero if any suite
failed, so ``--quick`` doubles as a smoke test.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import sys
import time
import traceback
from pathlib import Path

from bench.harness import Context, registered_groups, run_suites
from bench.report import Report

# Add new suite modules here; order is the order groups run and print in.
SUITE_MODULES: tuple[str, ...] = (
    "bench.floor_grpc",
    "bench.floor_lmdb",
    "bench.floor_s3",
    "bench.ctxd_memory",
    "bench.ctxd_memory_search",
    "bench.ctxd_contexts",
    "bench.ctxd_replicas",
    "bench.ctxd_postgres",
    "bench.ctxd_compaction",
    "bench.ctxd_ledger",
    "bench.ctxd_index",
    "bench.ctxd_process",
    "bench.ctxd_ui",
    "bench.ctxd_history",
    "bench.peers",
    "bench.adk_sessions",
)

DEFAULT_JSON = Path(__file__).resolve().with_name("results.json")


def _parse_only(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    out: list[str] = []
    for v in values:
        for g in v.split(","):
            g = g.strip()
            if g and g not in out:
                out.append(g)
    return out or None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke mode: tiny N and durations (<15 s)")
    ap.add_argument(
        "--json",
        metavar="PATH",
        default=str(DEFAULT_JSON),
        help="JSON output (default: %(default)s)",
    )
    ap.add_argument(
        "--only",
        metavar="GROUP[,GROUP]",
        action="append",
        help="run only these groups (repeatable)",
    )
    ap.add_argument(
        "--tmpdir",
        metavar="DIR",
        default=None,
        help="where scratch dirs (LMDB) go (default: system tmp)",
    )
    ap.add_argument("--list", action="store_true", help="list groups and exit")
    args = ap.parse_args(argv)

    for mod in SUITE_MODULES:
        importlib.import_module(mod)
    known = registered_groups()
    if args.list:
        print("\n".join(known))
        return 0
    groups = _parse_only(args.only)
    if groups is not None:
        unknown = [g for g in groups if g not in known]
        if unknown:
            ap.error(f"unknown group(s): {', '.join(unknown)} (known: {', '.join(known)})")

    started = _dt.datetime.now(_dt.UTC)
    t0 = time.perf_counter()
    report = Report(
        meta={
            "mode": "quick" if args.quick else "full",
            "groups": groups or known,
            "argv": sys.argv[1:] if argv is None else list(argv),
            "started_at": started.isoformat(timespec="seconds"),
        }
    )
    ctx = Context(quick=args.quick, tmp_root=args.tmpdir)
    ok = run_suites(groups, ctx, report)
    try:
        from bench.compare import add_comparisons

        add_comparisons(report)  # ratios across suites: ctxd / peers, growth, targets
        from bench.ctxd_postgres import add_checks as add_postgres_checks

        add_postgres_checks(report)
        from bench.ctxd_ui import add_checks as add_ui_checks

        add_ui_checks(report)
        from bench.ctxd_history import add_checks as add_history_checks

        add_history_checks(report)
        from bench.ctxd_memory_search import add_checks as add_search_checks

        add_search_checks(report)
    except Exception as exc:  # noqa: BLE001 - keep the measured results
        ok = False
        report.failures.append(
            {"suite": "compare", "error": repr(exc), "traceback": traceback.format_exc()}
        )
    report.meta["duration_s"] = round(time.perf_counter() - t0, 2)

    print(report.table())
    path = report.write_json(args.json)
    print(f"\n{report.meta['mode']} run, {report.meta['duration_s']}s; JSON written to {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
