"""kill -9 at random moments while a client appends turns: every acknowledged
turn survives, versions stay contiguous, no turn is ever half-written, and
retries with the same idempotency key never append twice."""

from __future__ import annotations

import random
import threading
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc
from tests.conftest import FAST_RECONNECT
from tests.support.contexts import append, assistant, full, list_all, rpc_error, texts, user
from tests.support.crashloop import crash_runs, kill_while_working

KILLS = 20
RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,  # connection reset mid-call
}


class Appender(threading.Thread):
    """Appends turn 0, 1, 2, ... each with its own idempotency key, retrying a
    turn until it is acknowledged."""

    def __init__(self, address: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.rng = random.Random(seed)
        self.acked: dict[int, pb.AppendTurnResponse] = {}
        self.retries = 0
        self.error: grpc.RpcError | None = None
        self.stop = threading.Event()

    def turn(self, i: int) -> pb.AppendTurnRequest:
        size = self.rng.randrange(0, 3000)
        return pb.AppendTurnRequest(
            context_id="crash",
            idempotency_key=f"turn-{i}",
            messages=[user(f"turn {i} a"), assistant(f"turn {i} b " + "x" * size)],
        )

    def run(self) -> None:
        channel = grpc.insecure_channel(self.address, options=FAST_RECONNECT)
        stub = context_pb2_grpc.ContextServiceStub(channel)
        i = 0
        request = self.turn(i)
        try:
            while not self.stop.is_set():
                try:
                    resp = stub.AppendTurn(request, timeout=5, wait_for_ready=True)
                except grpc.RpcError as exc:
                    if exc.code() in RETRYABLE:
                        self.retries += 1
                        time.sleep(0.02)
                        continue
                    self.error = exc
                    return
                self.acked[i] = resp
                i += 1
                request = self.turn(i)
        finally:
            channel.close()


@pytest.mark.parametrize(("backend", "kills"), crash_runs(["lmdb", "s3", "postgres"], KILLS))
def test_kill_9_loses_no_acknowledged_turn(spawn_sidecar, store_uri_for, backend, kills):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    args = (
        "--store",
        store_uri_for(backend),
        "--set",
        "contexts.checkpoint_every=3",
        "--set",
        "contexts.checkpoint_bytes=8192",
        # Counts versions as turns: no automatic compaction in between.
        "--set",
        "contexts.auto_compact=false",
    )
    sc = spawn_sidecar(*args)
    client = Appender(sc.address, seed)
    client.start()
    try:
        kill_while_working(
            sc,
            lambda: len(client.acked),
            client.is_alive,
            rng,
            kills=kills,
            budget=600,
            max_pause=0.4,
        )
        time.sleep(0.3)
    finally:
        client.stop.set()
        client.join(30)
    assert client.error is None, f"seed {seed}: {client.error}"
    assert client.retries > 0, "no kill interrupted a call"
    acked = client.acked
    assert len(acked) > kills, f"seed {seed}: too few turns acknowledged ({len(acked)})"

    def check(ctx: pb.Context) -> None:
        n = ctx.version
        # The last turn may have been durable without its reply arriving.
        assert n in (len(acked), len(acked) + 1), f"seed {seed}"
        assert len(ctx.messages) == 2 * n, f"seed {seed}: a turn is half-written"
        assert ctx.turns == n
        for v in range(1, n + 1):
            i = v - 1  # turns are acknowledged in order, one version each
            a, b = ctx.messages[2 * v - 2], ctx.messages[2 * v - 1]
            assert a.user.text == f"turn {i} a", f"seed {seed}: version {v}"
            assert b.assistant.text.startswith(f"turn {i} b "), f"seed {seed}: version {v}"
            assert (a.id, b.id) == (f"m{2 * v - 1}", f"m{2 * v}")
            if i in acked:
                assert acked[i].version == v
                assert list(acked[i].message_ids) == [a.id, b.id]

    stub = sc.running().contexts
    check(full(stub, "crash"))
    # And once more from a clean restart (restore from the store only).
    sc.kill()
    sc.start(timeout=60)
    ctx = full(sc.running().contexts, "crash")
    check(ctx)
    # A retry of any acknowledged turn is answered, not appended.
    last = max(acked)
    again = sc.running().contexts.AppendTurn(client.turn(last), timeout=10)
    assert again.replayed and again.version == acked[last].version
    assert full(sc.running().contexts, "crash").version == ctx.version


@pytest.mark.parametrize("point", ["contexts.after_fence", "contexts.after_head_delete"])
def test_a_deletion_cut_short_by_a_crash_is_finished_on_restart(spawn_sidecar, tmp_path, point):
    import lmdb

    data = tmp_path / "data"
    args = ("--store", f"lmdb://{data}", "--set", "contexts.checkpoint_every=2")
    sc = spawn_sidecar(*args, env={"CTXD_CRASH_POINT": point})
    c = sc.running().contexts
    for i in range(7):
        append(c, "doomed", user(f"d{i}"))
        append(c, "kept", user(f"k{i}"))
    with pytest.raises(grpc.RpcError):
        c.DeleteContext(pb.DeleteContextRequest(context_id="doomed"), timeout=10)
    assert sc.proc.wait(10) == 70  # stopped at the crash point
    sc.env.pop("CTXD_CRASH_POINT")
    sc.start()
    c = sc.running().contexts
    err = rpc_error(full, c, "doomed")
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert [i.id for i in list_all(c)] == ["kept", "root"]
    assert len(full(c, "kept").messages) == 7
    assert sc.terminate() == 0  # a graceful stop lets the clean-up finish

    env = lmdb.open(str(data), readonly=True, lock=False)
    with env.begin() as txn:
        keys = [k.decode() for k, _ in txn.cursor()]
    env.close()
    assert [k for k in keys if "kept" in k]
    assert not [k for k in keys if "doomed" in k], keys


def test_a_deletion_cut_short_before_its_fence_never_happened(spawn_sidecar, tmp_path):
    """The fence record is the commit: a crash before it leaves the context
    whole, and its trash record is dropped at the next start."""
    import lmdb

    data = tmp_path / "data"
    args = ("--store", f"lmdb://{data}", "--set", "contexts.checkpoint_every=2")
    sc = spawn_sidecar(*args, env={"CTXD_CRASH_POINT": "contexts.after_trash_record"})
    c = sc.running().contexts
    for i in range(7):
        append(c, "spared", user(f"s{i}"))
    with pytest.raises(grpc.RpcError):
        c.DeleteContext(pb.DeleteContextRequest(context_id="spared"), timeout=10)
    assert sc.proc.wait(10) == 70  # stopped at the crash point
    sc.env.pop("CTXD_CRASH_POINT")
    sc.start()
    c = sc.running().contexts
    assert texts(full(c, "spared")) == [f"s{i}" for i in range(7)]
    assert append(c, "spared", user("s7")).version == 8
    assert sc.terminate() == 0

    env = lmdb.open(str(data), readonly=True, lock=False)
    with env.begin() as txn:
        keys = [k.decode() for k, _ in txn.cursor()]
    env.close()
    assert not [k for k in keys if "context-trash" in k and "_index" not in k], keys
