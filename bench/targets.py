"""The README's speed targets: each a row of the report held to a limit.

``bench.compare`` computes them after every run (MET / MISSED / n/a); a
target names where its value comes from, so a renamed row is a one-line
change here.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The derived row of AppendTurn against its write floor (``bench.compare``).
APPEND_TURN_VS_FLOOR = "ratio.append_turn.lmdb_vs_floor"


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
