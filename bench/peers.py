"""Peers: what one durable conversation turn costs in the stores users pick instead.

Same workload as ctxd's AppendTurn rows: every turn is one user message and
one assistant message of 1 KB of text each, measured with 10, 1,000, 4,000
and 10,000 messages already in the conversation. Results are named
``peer.<peer>.h<mark>`` (p50/p99 in µs); ``bench.compare`` puts them next to
ctxd's rows.

LangGraph + ``SqliteSaver`` (``peer.langgraph_sqlite.h<mark>``)
    A ``StateGraph(MessagesState)`` (``messages`` reduced with
    ``add_messages``) with one ``assistant`` node that returns the canned 1 KB
    reply, compiled with a ``SqliteSaver`` on a file. One turn is
    ``graph.invoke({"messages": [user]}, thread, durability="sync")``: LangGraph
    loads the thread's latest checkpoint and writes one checkpoint for the
    input and one after the node, each holding the whole message list; with
    ``durability="sync"`` each is committed before the next step starts.
    Durability settings: the saver itself sets ``journal_mode=WAL``; we open
    the connection with ``synchronous=FULL`` (the sqlite default here too,
    set explicitly) so every commit fsyncs the WAL. Both are read back and
    recorded in the row.

    Building history turn by turn costs O(n^2): 500 turns to 1,000 messages
    took 16.6 s and left a 918 MB database on the development machine, so
    10,000 messages would take about half an hour and ~90 GB. The bench
    builds each thread with ``graph.update_state`` in batches of
    ``BULK_BATCH`` messages instead: the same reducer and the same checkpoint
    format, only fewer checkpoints. The next turn costs the same either way
    (p50 63 ms turn-by-turn vs 62 ms bulk-built at 1,000 messages), because
    a step reads the latest checkpoint by key and rewrites the full list.

OpenAI Agents SDK ``SQLiteSession`` (``peer.agents_sqlite.h<mark>``)
    A file-backed ``SQLiteSession``; one turn is ``add_items([user,
    assistant])`` with the items the Runner stores (an input message and a
    ``ResponseOutputMessage``), awaited on an asyncio loop as the SDK runs it
    (its sqlite work goes to a worker thread). The session sets
    ``journal_mode=WAL``; we add ``synchronous=FULL`` on each of its
    connections (again the sqlite default here) and record what was in
    force. History is built with bulk ``add_items`` (one ``executemany``
    per batch), which is what a turn-by-turn build writes too. The Runner
    also reads the whole session (``get_items()``) at the start of each
    turn; that read alone is reported as
    ``peer.agents_sqlite.history_read.h<mark>``, and every measured turn is
    followed by it, so ``peer.agents_sqlite.turn.h<mark>`` is the whole turn
    (``add_items`` + ``get_items``), what ``ctxd.turn.*`` is compared with.

Measured turns add messages, so to keep each mark honest the turns are spread
over several conversations built to the same mark, at most ``GROWTH_BUDGET``
of the mark (and at least one turn) per conversation.

If a peer's package is missing (``pip install -e '.[bench]'``), its suite
records a skip instead of failing.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import random
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

from bench.harness import Context, Result, filesystem_of, measure, register, result_from_samples

GROUP = "peers"
MARKS_FULL: tuple[int, ...] = (10, 1_000, 4_000, 10_000)
MARKS_QUICK: tuple[int, ...] = (10, 1_000)
MESSAGE_BYTES = 1024
BULK_BATCH = 1_000
GROWTH_BUDGET = 0.05  # measured turns may add at most this share of the mark per conversation
INSTALL_HINT = "pip install -e '.[bench]'"

LANGGRAPH = "langgraph_sqlite"
AGENTS = "agents_sqlite"


def result_name(peer: str, mark: int) -> str:
    return f"peer.{peer}.h{mark}"


def turn_texts(seed: int = 0) -> tuple[str, str]:
    """The (user, assistant) texts of every turn: ``MESSAGE_BYTES`` ASCII characters each."""
    rnd = random.Random(seed)
    words = ["context", "durable", "sidecar", "turn", "memory", "agent", "store", "plan"]

    def text() -> str:
        out = ""
        while len(out) < MESSAGE_BYTES:
            out += rnd.choice(words) + " "
        return out[:MESSAGE_BYTES]

    return text(), text()


def _turn_plan(mark: int, turns: int) -> tuple[int, list[int]]:
    """(conversations, conversation index of each turn) under ``GROWTH_BUDGET``."""
    per_conv = max(1, int(mark * GROWTH_BUDGET) // 2)
    convs = math.ceil(turns / per_conv)
    return convs, [i // per_conv for i in range(turns)]


def _sizes(ctx: Context, peer: str, mark: int) -> tuple[int, int]:
    """(n, warmup) for ``peer`` at ``mark``: N >= 20 at big marks, more at small ones."""
    if peer == LANGGRAPH:
        full = {10: 200, 1_000: 50, 4_000: 30, 10_000: 20}[mark]
        n = ctx.pick(full=full, quick=5)
        return n, ctx.pick(full=max(2, n // 10), quick=1)
    n = ctx.pick(full=200, quick=20)
    return n, ctx.pick(full=20, quick=2)


# --------------------------------------------------------------------------
# LangGraph + SqliteSaver
# --------------------------------------------------------------------------


@register(GROUP)
def langgraph_sqlite(ctx: Context) -> Iterator[Result]:
    try:
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph
    except ImportError as exc:
        ctx.skip(f"peer.{LANGGRAPH}", f"{exc.name or exc} not installed ({INSTALL_HINT})")
        return
    from importlib import metadata

    user_text, assistant_text = turn_texts()

    def assistant(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content=assistant_text)]}

    graph = StateGraph(MessagesState)
    graph.add_node("assistant", assistant)
    graph.add_edge(START, "assistant")
    graph.add_edge("assistant", END)

    history: list[Any] = []
    for _ in range(max(MARKS_FULL) // 2):
        history += [HumanMessage(content=user_text), AIMessage(content=assistant_text)]

    versions = {
        d: metadata.version(d)
        for d in ("langgraph", "langgraph-checkpoint-sqlite", "langchain-core")
    }
    workdir = ctx.tmpdir(prefix="bench-peer-langgraph-")
    for mark in ctx.pick(full=MARKS_FULL, quick=MARKS_QUICK):
        n, warmup = _sizes(ctx, LANGGRAPH, mark)
        convs, plan = _turn_plan(mark, warmup + n)
        path = os.path.join(workdir, f"h{mark}.sqlite")
        conn = sqlite3.connect(path, check_same_thread=False)
        try:
            conn.execute("PRAGMA synchronous=FULL")
            saver = SqliteSaver(conn)
            saver.setup()
            pragmas = {
                "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
                "synchronous": conn.execute("PRAGMA synchronous").fetchone()[0],
            }
            if pragmas != {"journal_mode": "wal", "synchronous": 2}:
                raise RuntimeError(f"sqlite not durable per commit: {pragmas}")
            app = graph.compile(checkpointer=saver)
            configs = [{"configurable": {"thread_id": f"h{mark}-c{i}"}} for i in range(convs)]

            t0 = time.perf_counter()
            for cfg in configs:
                for start in range(0, mark, BULK_BATCH):
                    app.update_state(
                        cfg, {"messages": history[start : min(mark, start + BULK_BATCH)]}
                    )
            build_s = time.perf_counter() - t0

            turns = iter(plan)

            def turn(app: Any = app, configs: list[Any] = configs, turns: Any = turns) -> None:
                cfg = configs[next(turns)]
                app.invoke({"messages": [HumanMessage(content=user_text)]}, cfg, durability="sync")

            result = measure(
                turn,
                n,
                warmup,
                name=result_name(LANGGRAPH, mark),
                group=GROUP,
                extra={
                    "mark": mark,
                    "turn": "graph.invoke(user) -> assistant node reply, durability='sync'",
                    "message_bytes": MESSAGE_BYTES,
                    "conversations": convs,
                    "build": f"update_state, {BULK_BATCH}-message batches",
                    "build_s": round(build_s, 3),
                    **pragmas,
                    "fs": filesystem_of(path),
                    "versions": versions,
                },
            )
            got = len(app.get_state(configs[0]).values["messages"])
            want = mark + 2 * plan.count(0)
            if got != want:
                raise RuntimeError(f"conversation holds {got} messages, expected {want}")
            result.extra["db_bytes"] = sum(
                os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p)
            )
        finally:
            conn.close()
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.unlink(path + suffix)
        yield result


# --------------------------------------------------------------------------
# OpenAI Agents SDK SQLiteSession
# --------------------------------------------------------------------------


def _default_wal_synchronous() -> int:
    """``synchronous`` a fresh WAL connection of this sqlite build gets (2 = FULL)."""
    conn = sqlite3.connect(":memory:")
    try:
        return conn.execute("PRAGMA synchronous").fetchone()[0]
    finally:
        conn.close()


@register(GROUP)
def agents_sqlite(ctx: Context) -> Iterator[Result]:
    try:
        from agents import SQLiteSession
    except ImportError as exc:
        ctx.skip(f"peer.{AGENTS}", f"{exc.name or exc} not installed ({INSTALL_HINT})")
        return
    from importlib import metadata

    synchronous_seen: set[int] = set()

    class DurableSQLiteSession(SQLiteSession):
        """``SQLiteSession`` with ``synchronous=FULL`` stated on every connection it opens."""

        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute("PRAGMA synchronous=FULL")
            synchronous_seen.add(conn.execute("PRAGMA synchronous").fetchone()[0])

    user_text, assistant_text = turn_texts()

    def items(turn: int) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": user_text},
            {
                "id": f"msg_{turn:08d}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": assistant_text, "annotations": []}],
            },
        ]

    history: list[dict[str, Any]] = []
    for i in range(max(MARKS_FULL) // 2):
        history += items(i)

    versions = {d: metadata.version(d) for d in ("openai-agents", "openai")}
    workdir = ctx.tmpdir(prefix="bench-peer-agents-")

    async def run_mark(path: str, mark: int, n: int, warmup: int) -> dict[str, Any]:
        convs, plan = _turn_plan(mark, warmup + n)
        write_ns: list[int] = []
        turn_ns: list[int] = []
        build_s = 0.0
        clock = time.perf_counter_ns
        turn_no = 0
        for conv in range(convs):
            session = DurableSQLiteSession(f"h{mark}-c{conv}", path)
            try:
                t0 = time.perf_counter()
                for start in range(0, mark, BULK_BATCH):
                    await session.add_items(history[start : min(mark, start + BULK_BATCH)])
                build_s += time.perf_counter() - t0
                if conv == 0:
                    gc.collect()
                for _ in range(plan.count(conv)):
                    batch = items(mark + turn_no)
                    t = clock()
                    await session.add_items(batch)
                    w = clock()
                    await session.get_items()  # what the Runner reads for the next turn
                    write_ns.append(w - t)
                    turn_ns.append(clock() - t)
                    turn_no += 1
                if conv == 0:
                    got = len(await session.get_items())
                    if got != mark + 2 * plan.count(0):
                        raise RuntimeError(f"session holds {got} items")
            finally:
                session.close()

        n_read = ctx.pick(full=20 if mark >= 4_000 else 50, quick=3)
        read_ns: list[int] = []
        session = DurableSQLiteSession(f"h{mark}-c0", path)
        try:
            await session.get_items()
            for _ in range(n_read):
                t = clock()
                await session.get_items()
                read_ns.append(clock() - t)
        finally:
            session.close()
        return {
            "write": write_ns[warmup:],
            "turn": turn_ns[warmup:],
            "read": read_ns,
            "convs": convs,
            "build_s": build_s,
        }

    loop = asyncio.new_event_loop()
    try:
        for mark in ctx.pick(full=MARKS_FULL, quick=MARKS_QUICK):
            n, warmup = _sizes(ctx, AGENTS, mark)
            path = os.path.join(workdir, f"h{mark}.sqlite")
            try:
                out = loop.run_until_complete(run_mark(path, mark, n, warmup))
                fs = filesystem_of(path)
            finally:
                for suffix in ("", "-wal", "-shm"):
                    if os.path.exists(path + suffix):
                        os.unlink(path + suffix)
            synchronous = sorted(synchronous_seen) or [_default_wal_synchronous()]
            if synchronous != [2]:
                raise RuntimeError(f"sqlite not durable per commit: synchronous={synchronous}")
            common = {
                "mark": mark,
                "message_bytes": MESSAGE_BYTES,
                "journal_mode": "wal",
                "synchronous": synchronous[0],
                "fs": fs,
                "versions": versions,
            }
            yield result_from_samples(
                out["write"],
                name=result_name(AGENTS, mark),
                group=GROUP,
                extra={
                    **common,
                    "turn": "await session.add_items([user, assistant])",
                    "warmup": warmup,
                    "conversations": out["convs"],
                    "build": f"add_items, {BULK_BATCH}-item batches",
                    "build_s": round(out["build_s"], 3),
                },
            )
            yield result_from_samples(
                out["turn"],
                name=f"peer.{AGENTS}.turn.h{mark}",
                group=GROUP,
                extra={
                    **common,
                    "turn": "await session.add_items([user, assistant]); await session.get_items()",
                    "warmup": warmup,
                    "conversations": out["convs"],
                },
            )
            yield result_from_samples(
                out["read"],
                name=f"peer.{AGENTS}.history_read.h{mark}",
                group=GROUP,
                extra={**common, "read": "await session.get_items() (whole history)"},
            )
    finally:
        loop.close()
