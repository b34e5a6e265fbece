"""Cross-suite figures, derived after all suites ran: ctxd / peer, growth, targets.

``add_comparisons(report)`` adds, from results already in the report:

* ``cmp.append_turn.<ctxd series>_vs_<peer>.h<mark>``: ctxd AppendTurn / peer
  turn at each history mark (below 1 means ctxd is faster; the note says by
  how much);
* ``cmp.turn.<ctxd series>_vs_<peer>.h<mark>``: a runtime's whole turn on
  ctxd (AppendTurn + the incremental slice read) / the peer's (write the
  turn + read the history back);
* ``growth.<series>``: the h10 -> h10000 ratio of every ctxd and peer series
  (n1000 -> n10000 for the key index);
* the README's targets, each MET / MISSED / n/a.

A result that is missing (suite skipped or failed, quick mode without the
10,000 mark) gives an ``n/a`` row naming it, never a silent gap; only a
mark that neither side measured is left out of the ctxd / peer rows. All
result names are in the tables below, so a rename in a suite is a one-line
change here.
"""

from __future__ import annotations

from bench.report import Report
from bench.targets import APPEND_TURN_VS_FLOOR, TARGETS, Target

GROUP = "compare"
MARKS: tuple[int, ...] = (10, 1_000, 4_000, 10_000)
GROWTH_FROM, GROWTH_TO = 10, 10_000

# ctxd AppendTurn series (label -> result name per history mark).
CTXD_APPEND_TURN: dict[str, str] = {
    "lmdb": "ctxd.append_turn.lmdb.h{mark}",
    "s3": "ctxd.append_turn.s3.h{mark}",
}
# Peer turn series compared with every ctxd series above.
PEERS: dict[str, str] = {
    "langgraph_sqlite": "peer.langgraph_sqlite.h{mark}",
    "agents_sqlite": "peer.agents_sqlite.h{mark}",
}
# A runtime's whole turn on ctxd: AppendTurn + the incremental slice read, as
# two calls and as one (AppendTurn carrying the read).
CTXD_TURN: dict[str, str] = {
    "lmdb": "ctxd.turn.lmdb.h{mark}",
    "s3": "ctxd.turn.s3.h{mark}",
    "lmdb_one_call": "ctxd.turn_one_call.lmdb.h{mark}",
    "s3_one_call": "ctxd.turn_one_call.s3.h{mark}",
}
# The same turn on a peer: write the turn, read the history back.
TURN_PEERS: dict[str, str] = {
    "agents_sqlite": "peer.agents_sqlite.turn.h{mark}",
}
# (row prefix, ctxd series, peer series) compared mark by mark.
COMPARISONS: tuple[tuple[str, dict[str, str], dict[str, str]], ...] = (
    ("append_turn", CTXD_APPEND_TURN, PEERS),
    ("turn", CTXD_TURN, TURN_PEERS),
)
# Series that only get a growth row.
GROWTH_ONLY: dict[str, str] = {
    "incremental.lmdb": "ctxd.get_context.incremental.lmdb.h{mark}",
    "incremental.s3": "ctxd.get_context.incremental.s3.h{mark}",
    "peer.agents_sqlite.history_read": "peer.agents_sqlite.history_read.h{mark}",
    "peer.agents_sqlite.turn": "peer.agents_sqlite.turn.h{mark}",
    # Google ADK sessions (bench.adk_sessions): get_session of the 10 most recent events
    "adk.get_session.recent10.lmdb": "ctxd.adk.get_session.recent10.lmdb.h{mark}",
    "peer.adk_database.get_session.recent10": "peer.adk_database.get_session.recent10.h{mark}",
}
# AppendTurn against its write floor: the echo server's Put of the same request
# bytes (one fsync'd LMDB put inline, then echo), which the contexts group
# times in the same rounds as the turns (APPEND_TURN_VS_FLOOR the derived row).
APPEND_TURN_ROW, WRITE_FLOOR = "ctxd.append_turn.lmdb.h10", "floor.echo_put.turn.lmdb"

# Key index series: growth from INDEX_FROM to INDEX_TO existing contexts.
INDEX_FROM, INDEX_TO = 1_000, 10_000
INDEX_GROWTH: dict[str, str] = {
    "index.create.s3_nolist": "ctxd.index.create.s3-nolist.n{mark}",
    "index.bytes_per_create.s3_nolist": "ctxd.index.bytes_per_create.s3-nolist.n{mark}",
}


# Unit conversions for ``value`` targets: unit -> (dimension, size in base units).
_UNITS: dict[str, tuple[str, float]] = {
    "%": ("share", 0.01),
    "ns": ("time", 1e-9),
    "us": ("time", 1e-6),
    "ms": ("time", 1e-3),
    "s": ("time", 1.0),
    "B": ("bytes", 1.0),
    "bytes": ("bytes", 1.0),
    "KB": ("bytes", 1e3),
    "KiB": ("bytes", 1024.0),
    "MB": ("bytes", 1e6),
    "MiB": ("bytes", 1024.0**2),
    "GB": ("bytes", 1e9),
    "GiB": ("bytes", 1024.0**3),
}


def _convert(value: float, unit: str, to: str) -> float | None:
    a, b = _UNITS.get(unit), _UNITS.get(to)
    if a is None or b is None or a[0] != b[0]:
        return None
    return value * a[1] / b[1]


def _speed_note(ratio: float) -> str:
    if ratio < 1:
        return f"ctxd {1 / ratio:.1f}x faster"
    return f"ctxd {ratio:.2f}x slower"


def _series_present(report: Report, pattern: str, marks: tuple[int, ...] = MARKS) -> bool:
    return any(report.get(pattern.format(mark=m)) is not None for m in marks)


def add_ratios(report: Report) -> None:
    """ctxd / peer for every (ctxd series, peer) pair at every mark either side measured."""
    for prefix, ctxd_series, peer_series in COMPARISONS:
        for ctxd_label, ctxd_pattern in ctxd_series.items():
            for peer, peer_pattern in peer_series.items():
                for mark in MARKS:
                    names = (ctxd_pattern.format(mark=mark), peer_pattern.format(mark=mark))
                    if all(report.get(n) is None for n in names):
                        continue  # e.g. a mark quick mode does not run
                    row = report.add_ratio(
                        f"cmp.{prefix}.{ctxd_label}_vs_{peer}.h{mark}",
                        *names,
                        group=GROUP,
                    )
                    if row.p50 is not None:
                        row.note = _speed_note(row.p50)


def add_growth(report: Report) -> None:
    """Growth of every series that has any result in this run."""
    series = {f"append_turn.{k}": v for k, v in CTXD_APPEND_TURN.items()}
    series.update({f"turn.{k}": v for k, v in CTXD_TURN.items()})
    series.update({f"peer.{k}": v for k, v in PEERS.items()})
    series.update(GROWTH_ONLY)
    spans = [(label, pattern, GROWTH_FROM, GROWTH_TO, MARKS) for label, pattern in series.items()]
    spans += [(k, v, INDEX_FROM, INDEX_TO, (INDEX_FROM, INDEX_TO)) for k, v in INDEX_GROWTH.items()]
    for label, pattern, lo, hi, marks in spans:
        if not _series_present(report, pattern, marks):
            continue
        report.add_ratio(
            f"growth.{label}", pattern.format(mark=hi), pattern.format(mark=lo), group=GROUP
        )


def _target_value(report: Report, t: Target) -> tuple[float | None, str]:
    if t.kind in ("derived", "speedup"):
        d = report.get_derived(t.source)
        if d is None:
            return None, f"no {t.source} row"
        if d.p50 is None:
            return None, d.note
        if t.kind == "speedup":
            return (1 / d.p50 if d.p50 else None), ""
        return d.p50, ""
    r = report.get(t.source)
    if r is None:
        return None, f"missing {t.source}"
    if t.kind == "floor_ratio":
        ratio, _ = report.ratio(r)
        if ratio is None:
            return None, f"{t.source} has no resolvable floor ({r.ratio_to or 'no ratio_to'})"
        return ratio, f"vs {r.ratio_to}"
    if t.kind == "value":
        v = _convert(r.p50, r.unit, t.unit)
        if v is None:
            return None, f"cannot convert {r.unit} to {t.unit}"
        return v, ""
    raise ValueError(f"unknown target kind {t.kind!r}")


def add_targets(report: Report, targets: tuple[Target, ...] = TARGETS) -> None:
    """Evaluate every target; skip the block when none of its inputs exist in this run."""
    values = [(t, *_target_value(report, t)) for t in targets]
    if all(v is None for _, v, _ in values):
        return
    for t, value, why in values:
        note = "; ".join(x for x in (why, t.note) if x)
        report.add_check(
            t.name,
            t.description,
            source=t.source,
            value=value,
            op=t.op,
            limit=t.limit,
            unit=t.unit,
            note=note,
        )


def add_floor_ratios(report: Report) -> None:
    """AppendTurn / (echo + fsync'd put), when the contexts group ran."""
    if report.get(APPEND_TURN_ROW) is not None or report.get(WRITE_FLOOR) is not None:
        report.add_ratio(APPEND_TURN_VS_FLOOR, APPEND_TURN_ROW, WRITE_FLOOR, group=GROUP)


def add_comparisons(report: Report) -> None:
    """All derived rows and target checks, in table order."""
    add_ratios(report)
    add_growth(report)
    add_floor_ratios(report)
    add_targets(report)
