"""Two sidecar processes on one S3 bucket: interleaved writes to the same
context and the same memory key lose nothing, and the result equals a serial
history."""

from __future__ import annotations

import json
import threading

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb

TURNS_PER_WRITER = 15
INCREMENTS_PER_WRITER = 15


@pytest.mark.parametrize("backend", ["s3", "s3-nolist"])
def test_two_replicas_interleaving_writes_lose_no_update(spawn_sidecar, store_uri_for, backend):
    uri = store_uri_for(backend)
    replicas = [spawn_sidecar("--store", uri).running() for _ in range(2)]
    errors: list[BaseException] = []
    aborted = [0]
    unavailable = [0]

    def append(r, writer: int) -> None:
        for t in range(TURNS_PER_WRITER):
            request = cpb.AppendTurnRequest(
                context_id="shared",
                idempotency_key=f"w{writer}-t{t}",
                messages=[cpb.Message(user=cpb.UserMessage(text=f"w{writer} t{t}"))],
            )
            for _ in range(10):
                try:
                    r.contexts.AppendTurn(request, timeout=30)
                    break
                except grpc.RpcError as exc:
                    # The documented contract: UNAVAILABLE is safe to retry
                    # with the same idempotency key.
                    if exc.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    unavailable[0] += 1
            else:
                raise AssertionError("turn never acknowledged")

    def increment(r) -> None:
        done = 0
        while done < INCREMENTS_PER_WRITER:
            try:
                rec = r.memory.Get(mpb.GetRequest(key="counter"), timeout=30).record
                n, version = json.loads(rec.value_json), rec.version
                r.memory.Set(
                    mpb.SetRequest(
                        key="counter", value_json=json.dumps(n + 1), expected_version=version
                    ),
                    timeout=30,
                )
                done += 1
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.ABORTED:
                    raise
                aborted[0] += 1  # lost the race: re-read and retry

    replicas[0].memory.Set(mpb.SetRequest(key="counter", value_json="0"), timeout=30)

    def guarded(fn, *args):
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = []
    for i, r in enumerate(replicas):
        threads.append(threading.Thread(target=guarded, args=(append, r, 2 * i)))
        threads.append(threading.Thread(target=guarded, args=(append, r, 2 * i + 1)))
        threads.append(threading.Thread(target=guarded, args=(increment, r)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors

    # Memory: every acknowledged compare-and-set counted exactly once.
    for r in replicas:
        value = r.memory.Get(mpb.GetRequest(key="counter"), timeout=30).record.value_json
        assert json.loads(value) == 2 * INCREMENTS_PER_WRITER

    # Context: every turn exactly once, versions contiguous, same on both replicas.
    writers = 4
    want = {f"w{w} t{t}" for w in range(writers) for t in range(TURNS_PER_WRITER)}
    for r in replicas:
        # A turn on each replica first, so a cached copy catches up with the other's writes.
        r.contexts.AppendTurn(
            cpb.AppendTurnRequest(
                context_id="shared", messages=[cpb.Message(note=cpb.NoteMessage(text="sync"))]
            ),
            timeout=30,
        )
    # The replica that wrote last is up to date (reads are served from each
    # replica's cache, which catches up on its next write).
    final = (
        replicas[-1]
        .contexts.GetContext(cpb.GetContextRequest(context_id="shared"), timeout=30)
        .context
    )
    texts = [m.user.text for m in final.messages if m.HasField("user")]
    assert sorted(texts) == sorted(want) and len(texts) == len(want)
    assert final.version == writers * TURNS_PER_WRITER + 2
    seqs = [int(m.id[1:]) for m in final.messages]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
