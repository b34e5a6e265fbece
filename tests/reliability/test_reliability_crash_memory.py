"""kill -9 at random moments while a client sets and deletes memory keys, on
LMDB and on S3 without listing (where the key index is kept alongside the
records): after every restart each key holds what the client last saw
acknowledged (or the one write in flight at the kill), and List agrees
with Get (no key lost from the index, no key listed that is not there)."""

from __future__ import annotations

import random
import threading
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2_grpc
from tests.conftest import FAST_RECONNECT
from tests.support.crashloop import crash_runs, kill_while_working
from tests.support.memory_helpers import list_all

KILLS = 12
#: Wall-clock budget for the kill loop of one backend (seconds).
BUDGET = 30.0
KEYS = [f"crash/k{i:02d}" for i in range(16)] + ["crash/deep/a", "crash/deep/b", "other"]
RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,  # connection reset mid-call
}


class Writer(threading.Thread):
    """One writer: op n sets a key to {"n": n} or deletes it; an op is retried
    until acknowledged, then the next one starts."""

    def __init__(self, address: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.rng = random.Random(seed)
        #: key -> last acknowledged value (None: deleted)
        self.acked: dict[str, str | None] = {}
        #: (key, value or None) of the op not yet acknowledged
        self.in_flight: tuple[str, str | None] | None = None
        self.ops = 0
        self.retries = 0
        self.error: str | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        channel = grpc.insecure_channel(self.address, options=FAST_RECONNECT)
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        try:
            while not self.stop.is_set():
                key = self.rng.choice(KEYS)
                value = None if self.rng.random() < 0.2 else f'{{"n":{self.ops}}}'
                self.in_flight = (key, value)
                while not self.stop.is_set():
                    try:
                        if value is None:
                            stub.Delete(pb.DeleteRequest(key=key), timeout=5, wait_for_ready=True)
                        else:
                            stub.Set(
                                pb.SetRequest(key=key, value_json=value),
                                timeout=5,
                                wait_for_ready=True,
                            )
                    except grpc.RpcError as exc:
                        if exc.code() in RETRYABLE:
                            self.retries += 1
                            time.sleep(0.02)
                            continue
                        self.error = f"{exc.code()}: {exc.details()}"
                        return
                    self.acked[key] = value
                    self.in_flight = None
                    self.ops += 1
                    break
        finally:
            channel.close()


def check(address: str, writer: Writer, seed: int) -> None:
    channel = grpc.insecure_channel(address, options=FAST_RECONNECT)
    stub = memory_pb2_grpc.MemoryServiceStub(channel)
    try:
        present = {}
        for key in KEYS:
            try:
                present[key] = stub.Get(pb.GetRequest(key=key), timeout=30).record.value_json
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.NOT_FOUND, f"seed {seed}: {exc.details()}"
        for key in KEYS:
            allowed = {writer.acked.get(key)}
            if writer.in_flight is not None and writer.in_flight[0] == key:
                allowed.add(writer.in_flight[1])
            got, want = present.get(key), writer.acked.get(key)
            assert got in allowed, f"seed {seed}: {key} holds {got!r}; acknowledged {want!r}"
        listed = {r.key: r.value_json for r in list_all(stub, include_values=True)}
        assert listed == present, f"seed {seed}: List and Get disagree"
        assert [r.key for r in list_all(stub, prefix="crash/deep/")] == sorted(
            k for k in present if k.startswith("crash/deep/")
        )
    finally:
        channel.close()


@pytest.mark.parametrize(("backend", "kills"), crash_runs(["lmdb", "s3-nolist"], KILLS))
def test_kill_9_during_memory_writes_loses_no_acknowledged_write(
    spawn_sidecar, store_uri_for, backend, kills
):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    sc = spawn_sidecar("--store", store_uri_for(backend), "--set", "memory.sweep_interval=0")
    writer = Writer(sc.address, seed)
    writer.start()
    made = 0
    try:
        made = kill_while_working(
            sc, lambda: writer.ops, writer.is_alive, rng, kills=kills, budget=BUDGET
        )
        time.sleep(0.2)
    finally:
        writer.stop.set()
        writer.join(30)
    assert writer.error is None, f"seed {seed}: {writer.error}"
    assert writer.retries > 0, "no kill interrupted a call"
    assert writer.ops > made, f"seed {seed}: too few writes acknowledged ({writer.ops})"
    check(sc.address, writer, seed)
    # Once more after a clean restart: only the store is read.
    sc.kill()
    sc.start(timeout=60)
    check(sc.address, writer, seed)
    # The index accepts writes after all this: new keys appear in List.
    stub = sc.running().memory
    stub.Set(pb.SetRequest(key="after/x", value_json="1"), timeout=30)
    assert [r.key for r in list_all(stub, prefix="after/")] == ["after/x"]
    print(
        f"\nmemory crash loop on {backend}: {made} kills, {writer.ops} acknowledged ops, "
        f"{writer.retries} retries (seed {seed})"
    )
