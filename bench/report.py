"""The rows of a ``python -m bench`` run and its report: results, ratios
between them, targets checked against them, the printed table and the JSON.

Kept apart from the measuring (``bench.harness``) so a report can be
rebuilt from JSON, and compared across runs, without running anything."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

US = "us"
CALLS_PER_S = "calls/s"


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


def latency_stats_us(samples_ns: Sequence[int]) -> dict[str, float]:
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
    st = latency_stats_us(samples_ns)
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
# Report
# --------------------------------------------------------------------------


def format_number(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _fmt_value(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 0.1 else format_number(v)


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
                    format_number(r.p50),
                    format_number(r.p99),
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
