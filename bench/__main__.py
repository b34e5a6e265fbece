"""Command-line entry point: ``python -m bench [--quick] [--json PATH] [--only G,...] [--merge]``.

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
from bench.merge import MergeError, load_earlier, note_duration, seed_report
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
    "bench.ctxd_fidelity",
    "bench.ctxd_index",
    "bench.ctxd_process",
    "bench.ctxd_ui",
    "bench.ctxd_history",
    "bench.history_peers",
    "bench.peers",
    "bench.adk_sessions",
)

#: Targets and ratios computed over a whole run's rows, across groups, after it.
CHECK_FUNCTIONS: tuple[str, ...] = (
    "bench.compare:add_comparisons",
    "bench.ctxd_postgres:add_checks",
    "bench.ctxd_ui:add_checks",
    "bench.ctxd_history:add_checks",
    "bench.history_peers:add_checks",
    "bench.ctxd_fidelity:add_checks",
    "bench.ctxd_memory_search:add_checks",
)

DEFAULT_JSON = Path(__file__).resolve().with_name("results.json")


def add_checks(report: Report) -> None:
    """Compute every cross-group ratio and target over the report's rows."""
    for ref in CHECK_FUNCTIONS:
        module, name = ref.split(":")
        getattr(importlib.import_module(module), name)(report)


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
    ap.add_argument(
        "--merge",
        action="store_true",
        help="measure only the --only groups again and merge them into the run at --json",
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
    if args.merge:
        try:
            earlier = load_earlier(args.json, groups or [], report.meta["mode"])
        except MergeError as exc:
            ap.error(str(exc))
        seed_report(report, earlier, groups or [])
    ctx = Context(quick=args.quick, tmp_root=args.tmpdir)
    ok = run_suites(groups, ctx, report)
    try:
        add_checks(report)
    except Exception as exc:  # noqa: BLE001 - keep the measured results
        ok = False
        report.failures.append(
            {"suite": "compare", "error": repr(exc), "traceback": traceback.format_exc()}
        )
    if args.merge:
        note_duration(report, time.perf_counter() - t0)
    else:
        report.meta["duration_s"] = round(time.perf_counter() - t0, 2)

    print(report.table())
    path = report.write_json(args.json)
    took = report.meta["reruns"][-1]["duration_s"] if args.merge else report.meta["duration_s"]
    print(f"\n{report.meta['mode']} run, {took}s; JSON written to {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
