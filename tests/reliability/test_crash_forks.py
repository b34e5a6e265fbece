"""kill -9 at random moments during a burst of ForkContext calls (a real
sidecar process on LMDB): every acknowledged fork is readable after the
restart and holds its source as of the version it was forked at, a retry
under the same idempotency key answers the same fork, and no source changed."""

from __future__ import annotations

import random
import threading
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc
from tests.conftest import FAST_RECONNECT
from tests.reliability.test_crash_contexts import RETRYABLE
from tests.support.contexts import append, assistant, user
from tests.support.crashloop import crash_runs, kill_while_working

SOURCES = ("s0", "s1")
TURNS = 20


def transcript(stub, cid: str, at: int = 0) -> tuple[int, list[str]]:
    got = stub.GetContext(
        pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_FULL, at_version=at), timeout=10
    )
    return got.info.version, [m.user.text or m.assistant.text for m in got.context.messages]


class Forker(threading.Thread):
    """Forks fork-0, fork-1, ... from the sources, at the latest version or
    an earlier one, each under its own idempotency key, retrying a fork until
    it is acknowledged."""

    def __init__(self, address: str, seed: int, versions: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.address, self.versions = address, versions
        self.rng = random.Random(seed)
        self.acked: dict[int, tuple[pb.ForkContextRequest, pb.ContextInfo]] = {}
        self.retries = 0
        self.error: grpc.RpcError | None = None
        self.stop = threading.Event()

    def request(self, i: int) -> pb.ForkContextRequest:
        src = SOURCES[i % len(SOURCES)]
        at = 0 if self.rng.random() < 0.5 else self.rng.randrange(1, self.versions[src] + 1)
        return pb.ForkContextRequest(
            source_id=src, at_version=at, context_id=f"fork-{i}", idempotency_key=f"k{i}"
        )

    def run(self) -> None:
        channel = grpc.insecure_channel(self.address, options=FAST_RECONNECT)
        stub = context_pb2_grpc.ContextServiceStub(channel)
        i, request = 0, self.request(0)
        try:
            while not self.stop.is_set():
                try:
                    resp = stub.ForkContext(request, timeout=5, wait_for_ready=True)
                except grpc.RpcError as exc:
                    if exc.code() in RETRYABLE:
                        self.retries += 1
                        time.sleep(0.02)
                        continue
                    self.error = exc
                    return
                self.acked[i] = (request, resp.info)
                i += 1
                request = self.request(i)
        finally:
            channel.close()


@pytest.mark.parametrize(("backend", "kills"), crash_runs(["lmdb"], 12))
def test_kill_9_during_a_burst_of_forks_loses_no_acknowledged_fork(
    spawn_sidecar, store_uri_for, backend, kills
):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    args = ("--store", store_uri_for(backend), "--set", "contexts.checkpoint_every=3")
    args += ("--set", "contexts.auto_compact=false")
    sc = spawn_sidecar(*args)
    stub = sc.running().contexts
    for src in SOURCES:
        for t in range(TURNS):
            append(stub, src, user(f"{src} q{t}"), assistant(f"{src} a{t}"))
    versions = {src: transcript(stub, src)[0] for src in SOURCES}
    before = {
        (src, v): transcript(stub, src, v)[1]
        for src in SOURCES
        for v in range(1, versions[src] + 1)
    }
    client = Forker(sc.address, seed, versions)
    client.start()
    try:
        kill_while_working(
            sc,
            lambda: len(client.acked),
            client.is_alive,
            rng,
            kills=kills,
            budget=600,
            max_pause=0.3,
        )
        time.sleep(0.3)
    finally:
        client.stop.set()
        client.join(30)
    assert client.error is None, f"seed {seed}: {client.error}"
    assert client.retries > 0, "no kill interrupted a call"
    assert len(client.acked) > kills, f"seed {seed}: too few forks acknowledged"
    sc.kill()  # and read everything back from the store alone
    sc.start(timeout=60)
    stub = sc.running().contexts
    for src in SOURCES:
        assert transcript(stub, src) == (versions[src], before[(src, versions[src])]), src
    for i, (request, info) in client.acked.items():
        at = request.at_version or versions[request.source_id]
        assert (info.forked_from, info.forked_at_version) == (request.source_id, at)
        got = transcript(stub, request.context_id)
        assert got == (at + 1, before[(request.source_id, at)]), f"seed {seed}: fork {i}"
        again = stub.ForkContext(request, timeout=10).info
        assert (again.version, again.forked_at_version) == (info.version, at)
