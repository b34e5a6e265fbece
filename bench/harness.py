"""Measurement primitives and the suite registry of ``python -m bench``
(the rows they produce and the report are ``bench.report``'s).

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
import os
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.report import (
    CALLS_PER_S,
    Check,
    Derived,
    Report,
    Result,
    format_number,
    latency_stats_us,
    percentile,
    result_from_samples,
)

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
    st = latency_stats_us(samples)
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
                            log(f"[bench]   {r.name}: {format_number(r.p50)} {r.unit}")
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
