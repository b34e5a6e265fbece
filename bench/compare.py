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

from dataclasses import dataclass

from bench.report import Report

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
# times in the same rounds as the turns.
APPEND_TURN_VS_FLOOR = "ratio.append_turn.lmdb_vs_floor"
APPEND_TURN_ROW, WRITE_FLOOR = "ctxd.append_turn.lmdb.h10", "floor.echo_put.turn.lmdb"

# Key index series: growth from INDEX_FROM to INDEX_TO existing contexts.
INDEX_FROM, INDEX_TO = 1_000, 10_000
INDEX_GROWTH: dict[str, str] = {
    "index.create.s3_nolist": "ctxd.index.create.s3-nolist.n{mark}",
    "index.bytes_per_create.s3_nolist": "ctxd.index.bytes_per_create.s3-nolist.n{mark}",
}


@dataclass(frozen=True)
class Target:
    """One README target. ``kind`` says where the value comes from:

    * ``"derived"``: a derived row's p50 (``source`` is its name);
    * ``"speedup"``: 1 / a derived ctxd/peer row's p50 (how many times faster);
    * ``"floor_ratio"``: a result's p50 ratio to its ``ratio_to`` baseline;
    * ``"value"``: a result's p50 converted to ``unit``.
    """

    name: str
    description: str
    kind: str
    source: str
    op: str
    limit: float
    unit: str = ""
    note: str = ""


TARGETS: tuple[Target, ...] = (
    Target(
        "target.memory.get_vs_floor",
        "Memory.Get p50 <= 1.10x gRPC echo",
        "floor_ratio",
        "ctxd.memory.get",
        "<=",
        1.10,
        "x",
    ),
    Target(
        "target.memory.set_vs_floor",
        "Memory.Set p50 <= 1.25x (echo + fsync'd LMDB put)",
        "floor_ratio",
        "ctxd.memory.set",
        "<=",
        1.25,
        "x",
    ),
    Target(
        "target.memory.get.tput.c16",
        "Memory.Get throughput, 16 callers >= 0.8x echo's",
        "floor_ratio",
        "ctxd.memory.get.tput.c16",
        ">=",
        0.8,
        "x",
    ),
    Target(
        "target.memory.set.tput.c16",
        "Memory.Set throughput, 16 callers >= 0.8x echo's",
        "floor_ratio",
        "ctxd.memory.set.tput.c16",
        ">=",
        0.8,
        "x",
    ),
    Target(
        "target.append_turn.vs_floor",
        "AppendTurn p50 (LMDB, 10 msgs) <= 1.25x (echo + fsync'd put of its size)",
        "derived",
        APPEND_TURN_VS_FLOOR,
        "<=",
        1.25,
        "x",
    ),
    Target(
        "target.append_turn.tput.c16",
        "AppendTurn throughput, 16 callers >= 0.8x echo's",
        "floor_ratio",
        "ctxd.append_turn.tput.c16",
        ">=",
        0.8,
        "x",
    ),
    Target(
        "target.append_turn.growth.lmdb",
        "AppendTurn growth 10 -> 10,000 msgs (LMDB) <= 1.15x",
        "derived",
        "growth.append_turn.lmdb",
        "<=",
        1.15,
        "x",
    ),
    Target(
        "target.append_turn.growth.s3",
        "AppendTurn growth 10 -> 10,000 msgs (S3) <= 1.15x",
        "derived",
        "growth.append_turn.s3",
        "<=",
        1.15,
        "x",
    ),
    Target(
        "target.append_turn.vs_langgraph.h4000",
        "AppendTurn p50 at 4,000 msgs >= 20x faster than LangGraph SqliteSaver step",
        "speedup",
        "cmp.append_turn.lmdb_vs_langgraph_sqlite.h4000",
        ">=",
        20.0,
        "x",
    ),
    Target(
        "target.slice_read.lmdb.h10000",
        "full slice read (every page) of 10,000 msgs (LMDB) <= 15 ms",
        "value",
        "ctxd.get_context.slice.lmdb.h10000",
        "<=",
        15.0,
        "ms",
    ),
    Target(
        "target.slice_read.floor.lmdb.h10000",
        "full slice read of 10,000 msgs (LMDB) / the same replies from an echo server <= 1.5x",
        "floor_ratio",
        "ctxd.get_context.slice.lmdb.h10000",
        "<=",
        1.5,
        "x",
    ),
    Target(
        "target.slice_read.floor.s3.h10000",
        "full slice read of 10,000 msgs (S3) / the same replies from an echo server after one "
        "store GET <= 1.5x",
        "floor_ratio",
        "ctxd.get_context.slice.s3.h10000",
        "<=",
        1.5,
        "x",
        note="a read at the default consistency asks the shared store first (one GET)",
    ),
    Target(
        "target.slice_read.floor.s3_cached.h10000",
        "full slice read of 10,000 msgs (S3, CACHED) / the same replies from an echo server "
        "<= 1.5x",
        "floor_ratio",
        "ctxd.get_context.slice_cached.s3.h10000",
        "<=",
        1.5,
        "x",
    ),
    *(
        Target(
            f"target.first_read.{store}.h10000",
            f"the first full slice read after a restore / a warm one, 10,000 msgs ({label}) <= 3x",
            "floor_ratio",
            f"ctxd.get_context.first_slice.{store}.h10000",
            "<=",
            3.0,
            "x",
        )
        for store, label in (("lmdb", "LMDB"), ("s3", "S3"))
    ),
    Target(
        "target.restore.lmdb.h10000",
        "restore of a 10,000-msg context in a fresh process (LMDB) <= 30 ms",
        "value",
        "ctxd.restore.lmdb.h10000",
        "<=",
        30.0,
        "ms",
    ),
    Target(
        "target.incremental_read.growth.lmdb",
        "incremental read of one turn, growth 10 -> 10,000 msgs (LMDB) <= 1.15x",
        "derived",
        "growth.incremental.lmdb",
        "<=",
        1.15,
        "x",
    ),
    Target(
        "target.incremental_read.growth.s3",
        "incremental read of one turn, growth 10 -> 10,000 msgs (S3) <= 1.15x",
        "derived",
        "growth.incremental.s3",
        "<=",
        1.15,
        "x",
    ),
    Target(
        "target.turn.vs_agents.h1000",
        "turn + incremental read at 1,000 msgs >= 3x faster than Agents add+get_items",
        "speedup",
        "cmp.turn.lmdb_vs_agents_sqlite.h1000",
        ">=",
        3.0,
        "x",
    ),
    Target(
        "target.turn.vs_agents.h10000",
        "turn + incremental read at 10,000 msgs >= 3x faster than Agents add+get_items",
        "speedup",
        "cmp.turn.lmdb_vs_agents_sqlite.h10000",
        ">=",
        3.0,
        "x",
    ),
    Target(
        "target.turn_one_call.vs_agents.h1000",
        "one-call turn (AppendTurn + read) at 1,000 msgs >= 3x faster than Agents add+get_items",
        "speedup",
        "cmp.turn.lmdb_one_call_vs_agents_sqlite.h1000",
        ">=",
        3.0,
        "x",
    ),
    Target(
        "target.turn_one_call.vs_agents.h10000",
        "one-call turn (AppendTurn + read), 10,000 msgs >= 3x faster than Agents add+get_items",
        "speedup",
        "cmp.turn.lmdb_one_call_vs_agents_sqlite.h10000",
        ">=",
        3.0,
        "x",
    ),
    Target(
        "target.turn.growth.lmdb",
        "turn + incremental read, growth 10 -> 10,000 msgs (LMDB) <= 1.15x",
        "derived",
        "growth.turn.lmdb",
        "<=",
        1.15,
        "x",
    ),
    Target(
        "target.turn.growth.s3",
        "turn + incremental read, growth 10 -> 10,000 msgs (S3) <= 1.15x",
        "derived",
        "growth.turn.s3",
        "<=",
        1.15,
        "x",
    ),
    Target(
        "target.ledger.recall.extractor.c1",
        "artifact recall after 1 compaction (extractor's truth) >= 95%",
        "value",
        "ctxd.ledger.recall.extractor.c1",
        ">=",
        95.0,
        "%",
    ),
    Target(
        "target.ledger.recall.expected.c1",
        "artifact recall after 1 compaction (hand-listed truth) >= 95%",
        "value",
        "ctxd.ledger.recall.expected.c1",
        ">=",
        95.0,
        "%",
    ),
    Target(
        "target.ledger.recall.extractor.c3",
        "artifact recall after 3 compactions (extractor's truth) >= 90%",
        "value",
        "ctxd.ledger.recall.extractor.c3",
        ">=",
        90.0,
        "%",
    ),
    Target(
        "target.ledger.recall.expected.c3",
        "artifact recall after 3 compactions (hand-listed truth) >= 90%",
        "value",
        "ctxd.ledger.recall.expected.c3",
        ">=",
        90.0,
        "%",
    ),
    Target(
        "target.index.create.growth",
        "create on S3 without LIST, p50 growth 1,000 -> 10,000 contexts <= 1.2x",
        "derived",
        "growth.index.create.s3_nolist",
        "<=",
        1.2,
        "x",
    ),
    Target(
        "target.index.bytes.growth",
        "create on S3 without LIST, index bytes growth 1,000 -> 10,000 <= 1.2x",
        "derived",
        "growth.index.bytes_per_create.s3_nolist",
        "<=",
        1.2,
        "x",
    ),
    Target(
        "target.cold_start",
        "cold start to SERVING <= 1.0 s",
        "value",
        "ctxd.cold_start",
        "<=",
        1.0,
        "s",
    ),
    Target(
        "target.adk.get_session.recent10.vs_database.h10000",
        "ADK get_session, 10 recent of 10,000 events: p50 <= 1.0x ADK DatabaseSessionService",
        "floor_ratio",
        "ctxd.adk.get_session.recent10.lmdb.h10000",
        "<=",
        1.0,
        "x",
    ),
    Target(
        "target.adk.get_session.recent10.growth",
        "ADK get_session, 10 recent events: growth 10 -> 10,000 events <= 1.25x",
        "derived",
        "growth.adk.get_session.recent10.lmdb",
        "<=",
        1.25,
        "x",
    ),
    Target(
        "target.adk.get_session.all.vs_database.h10000",
        "ADK get_session (no config) of 10,000 events, compacted in ctxd: p50 <= 0.1x ADK's",
        "floor_ratio",
        "ctxd.adk.get_session.all.compacted.lmdb.h10000",
        "<=",
        0.1,
        "x",
    ),
    Target(
        "target.adk.list_sessions.vs_database.n1000",
        "ADK list_sessions of 1,000 sessions: p50 <= 1.0x ADK DatabaseSessionService",
        "floor_ratio",
        "ctxd.adk.list_sessions.lmdb.n1000",
        "<=",
        1.0,
        "x",
    ),
    Target(
        "target.rss.idle_10000",
        "10,000 idle contexts resident <= 300 MB RSS",
        "value",
        "ctxd.rss.contexts.c10000",
        "<=",
        300.0,
        "MB",
        note="or bounded by the registry cap",
    ),
)

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
