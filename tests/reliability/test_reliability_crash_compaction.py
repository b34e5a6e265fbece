"""kill -9 at random moments while one client appends turns and another
compacts the same context (extractive summariser), on LMDB and S3: no
acknowledged turn is lost or counted twice, and every folded message is still
in the archive (ExpandCompaction). Folded messages are accounted
for by the summary (covers_messages), the kept tail keeps its ids and texts,
and the turn count matches what clients saw acknowledged."""

from __future__ import annotations

import random
import threading
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc
from tests.conftest import FAST_RECONNECT
from tests.reliability.test_crash_contexts import RETRYABLE, Appender
from tests.support.crashloop import crash_runs, kill_while_working

KILLS = 10
BUDGET = 30.0


class Compactor(threading.Thread):
    def __init__(self, address: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.rng = random.Random(seed)
        self.compacted = 0
        self.calls = 0
        self.error: str | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        channel = grpc.insecure_channel(self.address, options=FAST_RECONNECT)
        stub = context_pb2_grpc.ContextServiceStub(channel)
        try:
            while not self.stop.is_set():
                time.sleep(self.rng.uniform(0.01, 0.1))
                try:
                    resp = stub.Compact(
                        pb.CompactRequest(context_id="crash", keep_last=self.rng.choice([2, 4, 6])),
                        timeout=10,
                        wait_for_ready=True,
                    )
                except grpc.RpcError as exc:
                    # ABORTED: a turn landed while summarising; NOT_FOUND: no
                    # turn yet. Both are documented outcomes of a race.
                    if exc.code() in RETRYABLE or exc.code() in (
                        grpc.StatusCode.ABORTED,
                        grpc.StatusCode.NOT_FOUND,
                    ):
                        continue
                    self.error = f"{exc.code()}: {exc.details()}"
                    return
                self.calls += 1
                self.compacted += int(resp.compacted)
        finally:
            channel.close()


def check(stub, appender: Appender, seed: int) -> None:
    ctx = stub.GetContext(pb.GetContextRequest(context_id="crash"), timeout=30).context
    acked = appender.acked
    turns = ctx.turns
    # The last turn may have been durable without its reply arriving.
    assert turns in (len(acked), len(acked) + 1), f"seed {seed}: {turns} turns, {len(acked)} acked"
    total = 2 * turns
    assert ctx.summary.covers_messages + len(ctx.messages) == total, (
        f"seed {seed}: summary covers {ctx.summary.covers_messages}, "
        f"{len(ctx.messages)} kept, {total} appended"
    )
    first = total - len(ctx.messages) + 1
    assert [m.id for m in ctx.messages] == [f"m{k}" for k in range(first, total + 1)], (
        f"seed {seed}"
    )
    for m in ctx.messages:
        k = int(m.id[1:])
        i = (k - 1) // 2  # turn index
        text = m.user.text if k % 2 else m.assistant.text
        want = f"turn {i} a" if k % 2 else f"turn {i} b "
        assert text.startswith(want), f"seed {seed}: {m.id} holds {text[:30]!r}"
    for i, resp in acked.items():
        assert list(resp.message_ids) == [f"m{2 * i + 1}", f"m{2 * i + 2}"], f"seed {seed}"


def check_archive(stub, seed: int) -> None:
    """Lossless: every compaction record expands to exactly the messages it
    folded, and together with the kept tail they are every message once."""
    ctx = stub.GetContext(pb.GetContextRequest(context_id="crash"), timeout=30).context
    seen: list[str] = []
    for rec in ctx.compactions:
        assert rec.expandable, f"seed {seed}: {rec.id} not expandable"
        token, got = "", []
        while True:
            r = stub.ExpandCompaction(
                pb.ExpandCompactionRequest(
                    context_id="crash", compaction_id=rec.id, page_size=50, page_token=token
                ),
                timeout=30,
            )
            got += list(r.messages)
            token = r.next_page_token
            if not token:
                break
        ids = [m.id for m in got]
        assert len(ids) == rec.folded and ids[0] == rec.first_message_id, f"seed {seed}: {rec.id}"
        assert ids[-1] == rec.last_message_id, f"seed {seed}: {rec.id}"
        for m in got:
            k = int(m.id[1:])
            text = m.user.text if k % 2 else m.assistant.text
            want = f"turn {(k - 1) // 2} a" if k % 2 else f"turn {(k - 1) // 2} b "
            assert text.startswith(want), f"seed {seed}: archived {m.id} holds {text[:30]!r}"
        seen += ids
    if len(ctx.compactions) < 64:  # older records are dropped past records_kept
        seen += [m.id for m in ctx.messages]
        assert seen == [f"m{k}" for k in range(1, len(seen) + 1)], f"seed {seed}"


@pytest.mark.parametrize(("backend", "kills"), crash_runs(["lmdb", "s3"], KILLS))
def test_kill_9_during_compaction_loses_no_acknowledged_turn(
    spawn_sidecar, store_uri_for, backend, kills
):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    sc = spawn_sidecar(
        "--store",
        store_uri_for(backend),
        "--set",
        "contexts.checkpoint_every=3",
        "--set",
        "contexts.auto_compact=false",
    )
    appender = Appender(sc.address, seed)
    compactor = Compactor(sc.address, seed + 1)
    appender.start()
    compactor.start()
    made = 0
    try:
        made = kill_while_working(
            sc,
            lambda: (len(appender.acked), compactor.calls),
            appender.is_alive,
            rng,
            kills=kills,
            budget=BUDGET,
            max_pause=0.4,
        )
        time.sleep(0.3)
    finally:
        appender.stop.set()
        compactor.stop.set()
        appender.join(30)
        compactor.join(30)
    assert appender.error is None, f"seed {seed}: {appender.error}"
    assert compactor.error is None, f"seed {seed}: {compactor.error}"
    assert compactor.compacted > 0, f"seed {seed}: nothing was ever compacted"
    check(sc.running().contexts, appender, seed)
    sc.kill()
    sc.start(timeout=60)
    stub = sc.running().contexts
    check(stub, appender, seed)
    check_archive(stub, seed)
    # A retried turn is still answered from its idempotency key, not appended.
    last = max(appender.acked)
    again = stub.AppendTurn(appender.turn(last), timeout=10)
    assert again.replayed and again.version == appender.acked[last].version
    print(
        f"\ncompaction crash loop on {backend}: {made} kills, {len(appender.acked)} turns, "
        f"{compactor.compacted} compactions, {appender.retries} append retries (seed {seed})"
    )
