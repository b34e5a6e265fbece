"""History and branching: ForkContext and reads at an earlier version.

A real sidecar (``bench.ctxd_server``, LMDB, no automatic compaction) holds
conversations of 10, 1,000 and 10,000 turns (10, 100 and 1,000 in quick
mode), one user and one assistant message a turn. Rows (group ``history``):

* ``ctxd.fork.<store>.t<N>``: ForkContext of the conversation at its latest
  version into a new id, one call at a time (``bytes`` in the row: what one
  fork wrote, every key of the fork and its references, read back from the
  LMDB environment); ``<store>`` is ``lmdb``, and ``postgres`` where the
  machine can run PostgreSQL (``tests.support.pg_server``);
* ``ctxd.fork_baseline.append_turn.<store>.t<N>``: the baseline, measured in
  the same run: one AppendTurn of one message to a context of the same length
  (the issue's "a fork costs about an AppendTurn");
* ``ctxd.read_at.<store>.t<N>``: GetContext (slice, first page) at the version
  half way through, against ``ctxd.read_latest.<store>.t<N>``, the same read of
  the latest version.

Checks: ``target.fork.flat`` (the longest conversation's fork p50 within
1.5x of the shortest's: a fork does not grow with the history) and
``target.fork.p50`` (at most 5 ms at the longest), on each store; the peers'
rows and their check are in :mod:`bench.history_peers`.
"""

from __future__ import annotations

import contextlib
import itertools

import grpc

from bench.harness import Context, measure, register
from bench.procs import python_module_cmd, spawn
from bench.report import Report

GROUP = "history"
FORK_ROW = "ctxd.fork.{store}.t{n}"
APPEND_ROW = "ctxd.fork_baseline.append_turn.{store}.t{n}"
AT_ROW = "ctxd.read_at.{store}.t{n}"
LATEST_ROW = "ctxd.read_latest.{store}.t{n}"
ROWS = {"fork": FORK_ROW, "append": APPEND_ROW, "at": AT_ROW, "latest": LATEST_ROW}
SIZES = ((10, 1_000, 10_000), (10, 100, 1_000))
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
    path = f"{ctx.tmpdir()}/history"
    yield from _store(ctx, "lmdb", f"lmdb://{path}?map_size=4GiB", path)


@register(GROUP)
def postgres(ctx: Context):
    from tests.support import pg_server as pg

    reason = pg.unavailable_reason()
    if reason:
        ctx.skip(GROUP, f"postgres: {reason}")
        return
    server = pg.launch()
    try:
        yield from _store(ctx, "postgres", server.fresh_store_uri(pool_size=8), None)
    finally:
        pg.cleanup(server)


def _store(ctx: Context, label: str, uri: str, lmdb_path: str | None):
    from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc

    sizes, calls = ctx.pick(*SIZES), ctx.pick(60, 10)
    cmd = python_module_cmd(
        "bench.ctxd_server", "--store", uri, "--set", "contexts.auto_compact=false"
    )
    with (
        spawn(cmd) as (_, port),
        contextlib.closing(grpc.insecure_channel(f"127.0.0.1:{int(port)}")) as channel,
    ):
        grpc.channel_ready_future(channel).result(timeout=20)
        stub = context_pb2_grpc.ContextServiceStub(channel)
        for n in sizes:
            yield from _rows(stub, pb, n, calls, label, lmdb_path)


def fork_bytes(path: str, fork_id: str) -> int:
    """Bytes of every key one fork wrote (its head, head copy, lineage and
    references), read from the LMDB environment the sidecar writes."""
    import lmdb

    env = lmdb.open(path, readonly=True, lock=True, subdir=True, max_readers=256)
    total = 0
    try:
        with env.begin() as txn:
            for k, v in txn.cursor():
                key = k.decode()
                if key.endswith("/" + fork_id) or f"/{fork_id}/" in key or f"/{fork_id}~" in key:
                    total += len(k) + len(v)
    finally:
        env.close()
    return total


def _rows(stub, pb, n: int, calls: int, store: str, lmdb_path: str | None):
    """The four rows of one conversation length."""
    src, grow = f"bench:hist:{n}", f"bench:hist:{n}:appended"
    rows = {k: v.format(store=store, n=n) for k, v in ROWS.items()}
    version = _seed(stub, pb, src, n)
    _seed(stub, pb, grow, n)
    ids = (f"bench:fork:{n}:{i}" for i in itertools.count())
    first = f"bench:fork:{n}:first"
    stub.ForkContext(pb.ForkContextRequest(source_id=src, context_id=first))
    # (the first fork of a version seals the source's tail: measured once, below)
    written = fork_bytes(lmdb_path, first) if lmdb_path else None
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
        name=rows["append"],
        group=GROUP,
        extra={"turns": n},
    )
    yield measure(
        lambda: stub.ForkContext(
            pb.ForkContextRequest(source_id=src, context_id=next(ids)), timeout=30
        ),
        calls,
        name=rows["fork"],
        group=GROUP,
        ratio_to=rows["append"],
        extra={"turns": n, "store": store} | ({"bytes": written} if written else {}),
    )
    latest = pb.GetContextRequest(context_id=src, view=pb.CONTEXT_VIEW_SLICE, page_size=200)
    yield measure(
        lambda: stub.GetContext(latest, timeout=30),
        calls,
        name=rows["latest"],
        group=GROUP,
        extra={"turns": n},
    )
    at = pb.GetContextRequest()
    at.CopyFrom(latest)
    at.at_version = max(1, version // 2)
    yield measure(
        lambda: stub.GetContext(at, timeout=30),
        calls,
        name=rows["at"],
        group=GROUP,
        ratio_to=rows["latest"],
        extra={"turns": n, "at_version": at.at_version},
    )


def add_checks(report: Report) -> None:
    """A fork that does not grow with the history, and its p50, per store."""
    for store in ("lmdb", "postgres"):
        _checks(report, store, "" if store == "lmdb" else f".{store}")


def _checks(report: Report, store: str, suffix: str) -> None:
    forks = sorted(
        (r for r in report.results if r.name.startswith(f"ctxd.fork.{store}.t")),
        key=lambda r: r.extra.get("turns", 0),
    )
    if len(forks) < 2:
        return
    short, long = forks[0], forks[-1]
    report.add_check(
        f"target.fork.flat{suffix}",
        f"ForkContext p50 at {long.extra['turns']} turns over {short.extra['turns']} turns, "
        f"{store}",
        source=long.name,
        value=long.p50 / short.p50 if short.p50 else None,
        op="<=",
        limit=FLAT_LIMIT,
        unit="x",
    )
    report.add_check(
        f"target.fork.p50{suffix}",
        f"ForkContext p50 at {long.extra['turns']} turns, {store}",
        source=long.name,
        value=long.p50 / 1000,
        op="<=",
        limit=P50_LIMIT_MS,
        unit="ms",
    )
