"""ForkContext's peers: how LangGraph and the OpenAI Agents SDK branch a
conversation of the same length (bench extra: ``langgraph``,
``langgraph-checkpoint-sqlite``, ``openai-agents``).

Each holds 10, 1,000 and 10,000 turns (10, 100, 1,000 in quick mode), one
user and one assistant message a turn, the same texts as
:mod:`bench.ctxd_history` seeds, in a file on the same disk:

* ``peer.langgraph.sqlite.checkpoint_fork.t<N>``: a checkpoint fork on
  ``SqliteSaver`` (which has no ``copy_thread``): the thread's latest
  checkpoint read and written under a new thread id, the least a fork into a
  new thread does (``update_state`` on a checkpoint writes as much, and
  ``copy_thread``, where a saver has it, copies every checkpoint). The
  thread holds ten checkpoints (one every N/10 turns), each with the
  messages as of then, fewer than an agent writes (one per super-step);
* ``peer.agents.sqlite.branch_from_turn.t<N>``: the Agents SDK's
  ``AdvancedSQLiteSession.create_branch_from_turn`` at the last turn (it
  copies the items before it into the new branch), back on ``main`` before
  each call.

Check ``target.fork.peers``: at the longest conversation, each durable
peer's p50 over ctxd's ForkContext p50 on LMDB at least 20x.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3

from bench.harness import Context, measure, register
from bench.report import Report

GROUP = "history"
LG_SQLITE = "peer.langgraph.sqlite.checkpoint_fork.t{n}"
AGENTS = "peer.agents.sqlite.branch_from_turn.t{n}"
CTXD = "ctxd.fork.lmdb.t{n}"
BEAT_BY = 20.0


def _turn(i: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"question {i}: " + "words " * 20},
        {"role": "assistant", "content": f"answer {i}: " + "reply " * 30},
    ]


def _thread(saver, tid: str, n: int) -> None:
    """A LangGraph thread of ``n`` turns in ten checkpoints."""
    from langgraph.checkpoint.base import empty_checkpoint

    cfg = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    msgs: list[dict[str, str]] = []
    step = max(1, n // 10)
    for k, start in enumerate(range(0, n, step), 1):
        for i in range(start, min(n, start + step)):
            msgs += _turn(i)
        cp = empty_checkpoint()
        cp["channel_values"] = {"messages": list(msgs)}
        cp["channel_versions"] = {"messages": k}
        cfg = saver.put(cfg, cp, {"source": "loop", "step": k}, {"messages": k})


def _checkpoint_fork(saver, tid: str) -> None:
    """The thread's latest checkpoint, written as the first of thread ``tid``."""
    got = saver.get_tuple({"configurable": {"thread_id": "src", "checkpoint_ns": ""}})
    cp = dict(got.checkpoint)
    saver.put(
        {"configurable": {"thread_id": tid, "checkpoint_ns": ""}},
        cp,
        {**got.metadata, "source": "fork"},
        cp["channel_versions"],
    )


@register(GROUP)
def peers(ctx: Context):
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError as exc:
        ctx.skip(GROUP, f"peers: {exc} (pip install -e '.[bench]')")
        return
    sizes, calls = ctx.pick((10, 1_000, 10_000), (10, 100, 1_000)), ctx.pick(60, 10)
    for n in sizes:
        conn = sqlite3.connect(f"{ctx.tmpdir()}/langgraph-{n}.db", check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            _thread(saver, "src", n)
            ids = (f"fork-{i}" for i in itertools.count())
            yield measure(
                lambda saver=saver, ids=ids: _checkpoint_fork(saver, next(ids)),
                calls,
                name=LG_SQLITE.format(n=n),
                group=GROUP,
                ratio_to=CTXD.format(n=n),
                extra={"turns": n, "checkpoints": min(n, 10)},
            )
        finally:
            conn.close()
        yield from _agents(ctx, n, calls)


def _agents(ctx: Context, n: int, calls: int):
    try:
        from agents.extensions.memory import AdvancedSQLiteSession
    except ImportError as exc:
        ctx.skip(GROUP, f"peers: {exc}")
        return
    loop = asyncio.new_event_loop()
    session = AdvancedSQLiteSession(
        session_id="src", db_path=f"{ctx.tmpdir()}/agents-{n}.db", create_tables=True
    )
    try:
        for start in range(0, n, 100):
            items = [x for i in range(start, min(n, start + 100)) for x in _turn(i)]
            loop.run_until_complete(session.add_items(items))
        ids = (f"fork-{i}" for i in itertools.count())

        async def branch() -> None:
            await session.switch_to_branch("main")
            await session.create_branch_from_turn(n, next(ids))

        yield measure(
            lambda: loop.run_until_complete(branch()),
            calls,
            name=AGENTS.format(n=n),
            group=GROUP,
            ratio_to=CTXD.format(n=n),
            extra={"turns": n},
        )
    finally:
        session.close()
        loop.close()


def add_checks(report: Report) -> None:
    """ctxd's fork beats each durable peer by 20x at the longest conversation."""
    by_name = {r.name: r for r in report.results}
    ctxd = sorted(
        (r for r in report.results if r.name.startswith("ctxd.fork.lmdb.t")),
        key=lambda r: r.extra.get("turns", 0),
    )
    if not ctxd:
        return
    n = ctxd[-1].extra["turns"]
    for row, what in (
        (LG_SQLITE, "LangGraph SqliteSaver checkpoint fork"),
        (AGENTS, "Agents SDK branch"),
    ):
        peer = by_name.get(row.format(n=n))
        if peer is None:
            continue
        report.add_check(
            f"target.fork.peers.{row.split('.')[1]}",
            f"{what} p50 over ctxd ForkContext p50 at {n} turns (LMDB)",
            source=peer.name,
            value=peer.p50 / ctxd[-1].p50 if ctxd[-1].p50 else None,
            op=">=",
            limit=BEAT_BY,
            unit="x",
        )
