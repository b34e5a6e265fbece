"""History and branching: ForkContext and reads at an earlier version.

A real sidecar (``bench.ctxd_server``, LMDB, no automatic compaction) holds
conversations of 10, 1,000 and 10,000 turns (10, 100 and 1,000 in quick
mode), one user and one assistant message a turn. Rows (group ``history``):

* ``ctxd.fork.lmdb.t<N>``: ForkContext of the conversation at its latest
  version into a new id, one call at a time;
* ``ctxd.fork_baseline.append_turn.lmdb.t<N>``: the baseline, measured in the
  same run: one AppendTurn of one message to a context of the same length
  (the issue's "a fork costs about an AppendTurn");
* ``ctxd.read_at.lmdb.t<N>``: GetContext (slice, first page) at the version
  half way through, against ``ctxd.read_latest.lmdb.t<N>``, the same read of
  the latest version.

Checks: ``target.fork.flat`` (the longest conversation's fork p50 within
1.5x of the shortest's: a fork does not grow with the history) and
``target.fork.p50`` (at most 5 ms at the longest, LMDB).
"""

from __future__ import annotations

import contextlib
import itertools

import grpc

from bench.harness import Context, measure, register
from bench.procs import python_module_cmd, spawn
from bench.report import Report

GROUP = "history"
FORK_ROW = "ctxd.fork.lmdb.t{n}"
APPEND_ROW = "ctxd.fork_baseline.append_turn.lmdb.t{n}"
AT_ROW = "ctxd.read_at.lmdb.t{n}"
LATEST_ROW = "ctxd.read_latest.lmdb.t{n}"
FLAT_LIMIT = 1.5
P50_LIMIT_MS = 5.0


def _seed(stub, pb, cid: str, turns: int) -> int:
    """``turns`` turns in batches (one AppendTurn a batch of turns); the version."""
    version = 0
    for start in range(0, turns, 100):
        batch = []
        for i in range(start, min(turns, start + 100)):
            batch.append(pb.Message(user=pb.UserMessage(text=f"question {i}: " + "words " * 20)))
            batch.append(
                pb.Message(assistant=pb.AssistantMessage(text=f"answer {i}: " + "reply " * 30))
            )
        r = stub.AppendTurn(
            pb.AppendTurnRequest(context_id=cid, messages=batch, model_window=100_000_000),
            timeout=120,
        )
        version = r.version
    return version


@register(GROUP)
def suite(ctx: Context):
    from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc

    sizes = ctx.pick((10, 1_000, 10_000), (10, 100, 1_000))
    calls = ctx.pick(60, 10)
    store = f"lmdb://{ctx.tmpdir()}/history?map_size=4GiB"
    cmd = python_module_cmd(
        "bench.ctxd_server", "--store", store, "--set", "contexts.auto_compact=false"
    )
    with (
        spawn(cmd) as (_, port),
        contextlib.closing(grpc.insecure_channel(f"127.0.0.1:{int(port)}")) as channel,
    ):
        grpc.channel_ready_future(channel).result(timeout=20)
        stub = context_pb2_grpc.ContextServiceStub(channel)
        for n in sizes:
            yield from _rows(stub, pb, n, calls)


def _rows(stub, pb, n: int, calls: int):
    """The four rows of one conversation length."""
    src, grow = f"bench:hist:{n}", f"bench:hist:{n}:appended"
    version = _seed(stub, pb, src, n)
    _seed(stub, pb, grow, n)
    ids = (f"bench:fork:{n}:{i}" for i in itertools.count())
    yield measure(
        lambda: stub.AppendTurn(
            pb.AppendTurnRequest(
                context_id=grow,
                messages=[pb.Message(user=pb.UserMessage(text="one more"))],
                model_window=100_000_000,
            ),
            timeout=30,
        ),
        calls,
        name=APPEND_ROW.format(n=n),
        group=GROUP,
        extra={"turns": n},
    )
    yield measure(
        lambda: stub.ForkContext(
            pb.ForkContextRequest(source_id=src, context_id=next(ids)), timeout=30
        ),
        calls,
        name=FORK_ROW.format(n=n),
        group=GROUP,
        ratio_to=APPEND_ROW.format(n=n),
        extra={"turns": n},
    )
    latest = pb.GetContextRequest(context_id=src, view=pb.CONTEXT_VIEW_SLICE, page_size=200)
    yield measure(
        lambda: stub.GetContext(latest, timeout=30),
        calls,
        name=LATEST_ROW.format(n=n),
        group=GROUP,
        extra={"turns": n},
    )
    at = pb.GetContextRequest()
    at.CopyFrom(latest)
    at.at_version = max(1, version // 2)
    yield measure(
        lambda: stub.GetContext(at, timeout=30),
        calls,
        name=AT_ROW.format(n=n),
        group=GROUP,
        ratio_to=LATEST_ROW.format(n=n),
        extra={"turns": n, "at_version": at.at_version},
    )


def add_checks(report: Report) -> None:
    """A fork that does not grow with the history, and its p50 on LMDB."""
    forks = sorted(
        (r for r in report.results if r.name.startswith("ctxd.fork.lmdb.t")),
        key=lambda r: r.extra.get("turns", 0),
    )
    if len(forks) < 2:
        return
    short, long = forks[0], forks[-1]
    report.add_check(
        "target.fork.flat",
        f"ForkContext p50 at {long.extra['turns']} turns over {short.extra['turns']} turns",
        source=long.name,
        value=long.p50 / short.p50 if short.p50 else None,
        op="<=",
        limit=FLAT_LIMIT,
        unit="x",
    )
    report.add_check(
        "target.fork.p50",
        f"ForkContext p50 at {long.extra['turns']} turns, LMDB",
        source=long.name,
        value=long.p50 / 1000,
        op="<=",
        limit=P50_LIMIT_MS,
        unit="ms",
    )
