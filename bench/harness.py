"""Measurement primitives, suite registry and report for ``python -m bench``.

Every benchmark in this package (the floors today, ctxd measurements later)
goes through this module so that all numbers are taken the same way and land
in one table/JSON with a ratio against a baseline measured in the same run.

Adding a measurement::

    from bench.harness import Context, measure, register, throughput

    @register("ctxd")
    def ctxd_get(ctx: Context):
        ...  # set up (use try/finally or ctx.cleanup for teardown)
        yield measure(call, ctx.pick(full=5000, quick=100), name="ctxd.get",
                      group="ctxd", ratio_to="grpc.echo.unary")

then list the module in ``bench.__main__.SUITE_MODULES``.

A suite whose optional dependency is missing calls ``ctx.skip(what, reason)``
and returns: the run stays green and the report lists the skip. Figures
computed from other results of the same run (``report.add_ratio``) and
pass/fail checks against stated targets (``report.add_check``) go in their
own sections of the table and JSON, after all suites ran.

Conventions:
* latency results use unit ``"us"``; ``p50``/``p99`` are microseconds.
* throughput results use unit ``"calls/s"``; ``p50`` holds the rate and
  ``p99`` is ``None`` (latency under load goes to ``extra``).
* ``ratio = result.p50 / baseline.p50`` (and ``ratio_p99`` likewise when both
  sides have a p99). Result names are unique within a run and ``ratio_to``
  names another result of the same run.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Check",
    "Context",
    "Derived",
    "Report",
    "Result",
    "Suite",
    "filesystem_of",
    "measure",
    "percentile",
    "register",
    "registered_groups",
    "result_from_samples",
    "run_suites",
    "throughput",
]

US = "us"
CALLS_PER_S = "calls/s"
RATIO = "x"


# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------


@dataclass
class Result:
    """One row of the report.

    For latency rows ``p50``/``p99`` are in ``unit`` (normally ``"us"``).
    For throughput rows ``p50`` is the rate and ``p99`` is ``None``.
    ``ratio_to`` is the name of another result in the same run.
    """

    name: str
    group: str
    unit: str
    p50: float
    p99: float | None
    n: int
    extra: dict[str, Any] = field(default_factory=dict)
    ratio_to: str | None = None


@dataclass
class Derived:
    """``numerator / denominator`` of two results of the same run, at p50 and p99.

    ``p50``/``p99`` are ``None`` when a side is missing or the units differ;
    ``note`` then says why, so the row prints as ``n/a`` instead of vanishing.
    """

    name: str
    group: str
    numerator: str
    denominator: str
    p50: float | None = None
    p99: float | None = None
    note: str = ""


@dataclass
class Check:
    """A stated target evaluated on this run: ``value <op> limit``.

    ``met`` is ``None`` (printed ``n/a``) when ``value`` could not be computed.
    ``source`` names the result or derived row the value comes from.
    """

    name: str
    description: str
    source: str
    value: float | None
    op: str
    limit: float
    unit: str = ""
    met: bool | None = None
    note: str = ""


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100) of pre-sorted values."""
    if not sorted_values:
        raise ValueError("percentile of empty sequence")
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * (q / 100.0)
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return float(sorted_values[lo])
    frac = pos - lo
    return float(sorted_values[lo]) * (1 - frac) + float(sorted_values[hi]) * frac


def _latency_stats_us(samples_ns: Sequence[int]) -> dict[str, float]:
    s = sorted(samples_ns)
    return {
        "p50": percentile(s, 50) / 1e3,
        "p90": percentile(s, 90) / 1e3,
        "p99": percentile(s, 99) / 1e3,
        "mean": (sum(s) / len(s)) / 1e3,
        "min": s[0] / 1e3,
        "max": s[-1] / 1e3,
    }


def result_from_samples(
    samples_ns: Sequence[int],
    *,
    name: str,
    group: str,
    ratio_to: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Result:
    """Build a latency ``Result`` (µs) from per-call durations in nanoseconds.

    Use this when ``measure`` does not fit (e.g. timing inside an event loop
    or excluding per-iteration setup).
    """
    if not samples_ns:
        raise ValueError(f"{name}: no samples")
    st = _latency_stats_us(samples_ns)
    ex = {
        "p90_us": round(st["p90"], 3),
        "mean_us": round(st["mean"], 3),
        "min_us": round(st["min"], 3),
        "max_us": round(st["max"], 3),
    }
    ex.update(extra or {})
    return Result(
        name=name,
        group=group,
        unit=US,
        p50=st["p50"],
        p99=st["p99"],
        n=len(samples_ns),
        extra=ex,
        ratio_to=ratio_to,
    )


# --------------------------------------------------------------------------
# Measurement helpers
# --------------------------------------------------------------------------


def measure(
    fn: Callable[[], Any],
    n: int,
    warmup: int | None = None,
    *,
    name: str,
    group: str,
    ratio_to: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Result:
    """Call ``fn()`` ``warmup`` times untimed, then ``n`` times timed one by one.

    Each call is timed with ``time.perf_counter_ns``; returns a latency
    ``Result`` in µs. ``warmup`` defaults to ``max(10, n // 10)``. A garbage
    collection is forced before the timed loop so it starts from a clean heap
    (GC stays enabled during timing: it is part of real-world cost).
    """
    if n <= 0:
        raise ValueError("n must be positive")
    if warmup is None:
        warmup = max(10, n // 10)
    for _ in range(warmup):
        fn()
    gc.collect()
    clock = time.perf_counter_ns
    samples = [0] * n
    for i in range(n):
        t0 = clock()
        fn()
        samples[i] = clock() - t0
    ex = {"warmup": warmup}
    ex.update(extra or {})
    return result_from_samples(samples, name=name, group=group, ratio_to=ratio_to, extra=ex)


def throughput(
    fn: Callable[[], Any],
    callers: int,
    seconds: float,
    *,
    name: str,
    group: str,
    warmup_seconds: float | None = None,
    ratio_to: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Result:
    """Run ``fn()`` in a closed loop from ``callers`` threads for ``seconds``.

    All threads start together, run ``warmup_seconds`` (default: 20% of
    ``seconds``, capped at 1 s) untimed, then count calls that both start and
    finish inside the measurement window. Returns a ``Result`` with unit
    ``"calls/s"``, ``p50`` = rate, ``p99`` = None and per-call latency under
    load (µs) in ``extra``. ``fn`` must be thread-safe. The first exception
    raised by any caller is re-raised after all threads stop.
    """
    if callers <= 0:
        raise ValueError("callers must be positive")
    if warmup_seconds is None:
        warmup_seconds = min(1.0, seconds * 0.2)
    clock = time.perf_counter_ns
    barrier = threading.Barrier(callers + 1)
    window: dict[str, int] = {}
    per_thread: list[list[int]] = [[] for _ in range(callers)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def worker(idx: int) -> None:
        lat = per_thread[idx]
        barrier.wait()
        t_start = window["start"]
        t_end = window["end"]
        try:
            while not stop.is_set():
                s = clock()
                fn()
                e = clock()
                if e > t_end:
                    break
                if s >= t_start:
                    lat.append(e - s)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
            stop.set()

    threads = [
        threading.Thread(target=worker, args=(i,), name=f"bench-{name}-{i}", daemon=True)
        for i in range(callers)
    ]
    for t in threads:
        t.start()
    gc.collect()
    now = clock()
    window["start"] = now + int(warmup_seconds * 1e9)
    window["end"] = window["start"] + int(seconds * 1e9)
    barrier.wait()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]

    samples = [x for lat in per_thread for x in lat]
    if not samples:
        raise RuntimeError(f"{name}: no call completed inside the {seconds}s window")
    st = _latency_stats_us(samples)
    rate = len(samples) / seconds
    ex: dict[str, Any] = {
        "callers": callers,
        "seconds": seconds,
        "warmup_seconds": warmup_seconds,
        "lat_p50_us": round(st["p50"], 3),
        "lat_p99_us": round(st["p99"], 3),
        "lat_mean_us": round(st["mean"], 3),
    }
    ex.update(extra or {})
    return Result(
        name=name,
        group=group,
        unit=CALLS_PER_S,
        p50=rate,
        p99=None,
        n=len(samples),
        extra=ex,
        ratio_to=ratio_to,
    )


def interleaved_throughput(
    plan: Sequence[tuple[str, Callable[[], Any], str | None, dict[str, Any]]],
    callers: int,
    seconds: float,
    rounds: int,
    *,
    group: str,
    warmup_seconds: float,
) -> list[Result]:
    """:func:`throughput` of several workloads in alternating windows.

    ``plan`` is ``(name, fn, ratio_to, extra)`` per workload. Each of
    ``rounds`` rounds runs every workload for ``seconds / rounds`` (after its
    own ``warmup_seconds``), so load that drifts during the run falls on
    both sides of a ratio alike. A workload's rate is its calls over all its
    windows divided by their total time; ``extra["round_rates"]`` keeps each
    window's rate and the latency figures are medians over the windows.
    """
    if rounds <= 0:
        raise ValueError("rounds must be positive")
    window = seconds / rounds
    per: dict[str, list[Result]] = {name: [] for name, *_ in plan}
    for _ in range(rounds):
        for name, fn, _ratio, _extra in plan:
            per[name].append(
                throughput(
                    fn, callers, window, name=name, group=group, warmup_seconds=warmup_seconds
                )
            )
    out = []
    for name, _fn, ratio_to, extra in plan:
        runs = per[name]
        calls = sum(r.n for r in runs)
        ex: dict[str, Any] = {
            "callers": callers,
            "seconds": seconds,
            "rounds": rounds,
            "warmup_seconds": warmup_seconds,
            "round_rates": [round(r.p50, 1) for r in runs],
        }
        for key in ("lat_p50_us", "lat_p99_us", "lat_mean_us"):
            ex[key] = statistics.median(r.extra[key] for r in runs)
        ex.update(extra)
        out.append(
            Result(
                name=name,
                group=group,
                unit=CALLS_PER_S,
                p50=calls / seconds,
                p99=None,
                n=calls,
                extra=ex,
                ratio_to=ratio_to,
            )
        )
    return out


# --------------------------------------------------------------------------
# Suite registry
# --------------------------------------------------------------------------


@dataclass
class Context:
    """What a suite gets: run mode, scratch space and a cleanup stack.

    ``ctx.pick(full, quick)`` chooses a size by mode; ``ctx.tmpdir()`` makes a
    scratch directory removed at the end of the run; ``ctx.cleanup`` is an
    ``ExitStack`` closed after all suites (LIFO) for any other teardown.
    """

    quick: bool = False
    tmp_root: str | None = None
    cleanup: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    skips: list[dict[str, str]] = field(default_factory=list)

    def pick(self, full: Any, quick: Any) -> Any:
        return quick if self.quick else full

    def skip(self, what: str, reason: str) -> None:
        """Record that ``what`` was not measured and why (listed in the report)."""
        self.skips.append({"what": what, "reason": reason})

    def tmpdir(self, prefix: str = "bench-") -> str:
        d = self.cleanup.enter_context(
            tempfile.TemporaryDirectory(prefix=prefix, dir=self.tmp_root)
        )
        return d


Suite = Callable[[Context], Iterable[Result]]

_REGISTRY: dict[str, list[Suite]] = {}


def register(group: str) -> Callable[[Suite], Suite]:
    """Decorator: register ``suite(ctx) -> Iterable[Result]`` under ``group``.

    Suites are usually generators yielding results as they are measured, so
    partial results survive a later failure in the same suite.
    """

    def deco(fn: Suite) -> Suite:
        _REGISTRY.setdefault(group, []).append(fn)
        return fn

    return deco


def registered_groups() -> list[str]:
    return list(_REGISTRY)


def run_suites(
    groups: Iterable[str] | None,
    ctx: Context,
    report: Report,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
) -> bool:
    """Run registered suites (all groups, or only ``groups``), in registration order.

    A failing suite is logged and recorded in ``report.failures``; the others
    still run. Returns True when every suite succeeded. ``ctx.cleanup`` is
    closed before returning.
    """
    wanted = list(_REGISTRY) if groups is None else list(groups)
    unknown = [g for g in wanted if g not in _REGISTRY]
    if unknown:
        raise KeyError(f"unknown group(s) {unknown}; known: {list(_REGISTRY)}")
    ok = True
    with ctx.cleanup:
        for g in wanted:
            for suite in _REGISTRY[g]:
                sname = f"{g}:{getattr(suite, '__name__', suite)}"
                log(f"[bench] {sname} ...")
                t0 = time.perf_counter()
                try:
                    it = suite(ctx)
                    try:
                        for r in it:
                            report.add(r)
                            log(f"[bench]   {r.name}: {_fmt_num(r.p50)} {r.unit}")
                    finally:
                        close = getattr(it, "close", None)
                        if close is not None:
                            close()  # run the suite's own teardown now, not at GC
                except Exception as exc:  # noqa: BLE001 - keep other suites running
                    ok = False
                    report.failures.append(
                        {"suite": sname, "error": repr(exc), "traceback": traceback.format_exc()}
                    )
                    log(f"[bench] {sname} FAILED: {exc!r}\n{traceback.format_exc()}")
                while ctx.skips:
                    skip = ctx.skips.pop(0)
                    report.skipped.append({"suite": sname, **skip})
                    log(f"[bench]   SKIPPED {skip['what']}: {skip['reason']}")
                log(f"[bench] {sname} done in {time.perf_counter() - t0:.1f}s")
    return ok


def filesystem_of(path: str | os.PathLike[str]) -> str:
    """``"<fstype> on <mountpoint>"`` for ``path`` (Linux; ``"unknown"`` elsewhere).

    Worth recording next to any fsync-bound number: tmpfs makes fsync free.
    """
    real = os.path.realpath(path)
    best = ("", "unknown")
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best[0]):
                    best = (mnt, parts[2])
    except OSError:
        return "unknown"
    return f"{best[1]} on {best[0]}" if best[0] else "unknown"


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def _fmt_num(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _fmt_value(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 0.1 else _fmt_num(v)


def _fmt_ratio(v: float | None) -> str:
    if v is None:
        return "n/a"
    if v < 0.1:
        return f"{v:.3g}x"
    return f"{v:.2f}x"


def _format_columns(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]

    def fmt(cols: list[str]) -> str:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cols, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return [fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows]


def _environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    try:
        env["cpu_affinity"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    from importlib import metadata

    versions = {}
    for dist in ("grpcio", "lmdb", "boto3", "botocore", "moto"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    env["versions"] = versions
    return env


class Report:
    """Collects results of one run, resolves ratios, prints a table, writes JSON."""

    def __init__(self, meta: dict[str, Any] | None = None) -> None:
        self.results: list[Result] = []
        self.failures: list[dict[str, str]] = []
        self.skipped: list[dict[str, str]] = []
        self.derived: list[Derived] = []
        self.checks: list[Check] = []
        self.meta: dict[str, Any] = dict(meta or {})
        self._by_name: dict[str, Result] = {}
        self._derived_by_name: dict[str, Derived] = {}

    def add(self, result: Result) -> Result:
        if result.name in self._by_name:
            raise ValueError(f"duplicate result name {result.name!r}")
        self.results.append(result)
        self._by_name[result.name] = result
        return result

    def get(self, name: str) -> Result | None:
        return self._by_name.get(name)

    def get_derived(self, name: str) -> Derived | None:
        return self._derived_by_name.get(name)

    def add_ratio(
        self,
        name: str,
        numerator: str,
        denominator: str,
        *,
        group: str = "derived",
        note: str = "",
    ) -> Derived:
        """Add the derived row ``numerator / denominator`` (p50 and p99) by result name.

        A missing result or a unit mismatch gives an ``n/a`` row whose note
        names the cause; ``note`` is kept (prefixed) otherwise.
        """
        if name in self._derived_by_name:
            raise ValueError(f"duplicate derived name {name!r}")
        num, den = self._by_name.get(numerator), self._by_name.get(denominator)
        row = Derived(name=name, group=group, numerator=numerator, denominator=denominator)
        if num is None or den is None:
            missing = [n for n, r in ((numerator, num), (denominator, den)) if r is None]
            row.note = "missing " + ", ".join(missing)
        elif num.unit != den.unit:
            row.note = f"unit mismatch ({num.unit} vs {den.unit})"
        elif not den.p50:
            row.note = f"{denominator} p50 is zero"
        else:
            row.p50 = num.p50 / den.p50
            if num.p99 is not None and den.p99:
                row.p99 = num.p99 / den.p99
            row.note = note
        self.derived.append(row)
        self._derived_by_name[name] = row
        return row

    def add_check(
        self,
        name: str,
        description: str,
        *,
        source: str,
        value: float | None,
        op: str,
        limit: float,
        unit: str = "",
        note: str = "",
    ) -> Check:
        """Record target ``value <op> limit`` (op ``"<="`` or ``">="``); ``value=None`` is n/a."""
        if op not in ("<=", ">="):
            raise ValueError(f"op must be '<=' or '>=', not {op!r}")
        met = None if value is None else (value <= limit if op == "<=" else value >= limit)
        check = Check(
            name=name,
            description=description,
            source=source,
            value=value,
            op=op,
            limit=limit,
            unit=unit,
            met=met,
            note=note,
        )
        self.checks.append(check)
        return check

    def ratio(self, result: Result) -> tuple[float | None, float | None]:
        """(p50 ratio, p99 ratio) against ``result.ratio_to``; None when unresolved."""
        if not result.ratio_to:
            return None, None
        base = self._by_name.get(result.ratio_to)
        if base is None or base.unit != result.unit or not base.p50:
            return None, None
        r50 = result.p50 / base.p50
        r99 = None
        if result.p99 is not None and base.p99:
            r99 = result.p99 / base.p99
        return r50, r99

    def rows(self) -> list[list[str]]:
        out = []
        for r in self.results:
            r50, r99 = self.ratio(r)
            if r.ratio_to is None:
                ratio_s = ""
            elif r50 is None:
                ratio_s = "n/a"
            else:
                ratio_s = f"{r50:.2f}x" + (f" / {r99:.2f}x" if r99 is not None else "")
            out.append(
                [
                    r.group,
                    r.name,
                    r.unit,
                    _fmt_num(r.p50),
                    _fmt_num(r.p99),
                    str(r.n),
                    ratio_s,
                    r.ratio_to or "",
                ]
            )
        return out

    def table(self) -> str:
        header = ["group", "name", "unit", "p50|rate", "p99", "n", "ratio p50/p99", "vs"]
        lines = _format_columns(header, self.rows(), {3, 4, 5, 6})
        if self.derived:
            lines += ["", "derived (numerator / denominator, same run):"]
            lines += _format_columns(
                ["group", "name", "p50", "p99", "of", "note"],
                [
                    [
                        d.group,
                        d.name,
                        _fmt_ratio(d.p50),
                        _fmt_ratio(d.p99) if d.p50 is not None else "",
                        f"{d.numerator} / {d.denominator}",
                        d.note,
                    ]
                    for d in self.derived
                ],
                {2, 3},
            )
        if self.checks:
            lines += ["", "targets:"]
            lines += _format_columns(
                ["status", "target", "value", "limit", "from", "note"],
                [
                    [
                        {True: "MET", False: "MISSED", None: "n/a"}[c.met],
                        c.description,
                        "n/a" if c.value is None else f"{_fmt_value(c.value)}{c.unit}",
                        f"{c.op} {_fmt_value(c.limit)}{c.unit}",
                        c.source,
                        c.note,
                    ]
                    for c in self.checks
                ],
                {2, 3},
            )
        for s in self.skipped:
            lines.append(f"SKIPPED {s['what']} ({s['suite']}): {s['reason']}")
        for f in self.failures:
            lines.append(f"FAILED {f['suite']}: {f['error']}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        results = []
        for r in self.results:
            d = asdict(r)
            d["ratio"], d["ratio_p99"] = self.ratio(r)
            results.append(d)
        return {
            "meta": {**self.meta, "env": _environment()},
            "results": results,
            "derived": [asdict(d) for d in self.derived],
            "checks": [asdict(c) for c in self.checks],
            "skipped": self.skipped,
            "failures": self.failures,
        }

    def write_json(self, path: str | os.PathLike[str]) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")
        os.replace(tmp, p)
        return p
