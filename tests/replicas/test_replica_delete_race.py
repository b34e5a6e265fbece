"""A delete racing a steady writer on another replica completes (the fence
wins), and the writer goes on in a new conversation without losing a turn
it was told was stored. Real ``ctxd serve`` processes on one moto S3 server."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.support.contexts import append, full, texts, user


@pytest.mark.parametrize("backend", ["s3", "s3-nolist", "postgres"])
def test_a_delete_completes_while_another_replica_keeps_appending(
    spawn_sidecar, store_uri_for, backend
):
    uri = store_uri_for(backend)
    a = spawn_sidecar("--store", uri).running()
    b = spawn_sidecar("--store", uri).running()
    append(a.contexts, "busy", user("first"))
    stop = threading.Event()
    acked: list[tuple[str, int, str]] = []  # (incarnation, version, text)
    failures: list[grpc.StatusCode] = []

    def write() -> None:
        i = 0
        while not stop.is_set():
            text = f"w{i}"
            i += 1
            try:
                r = append(a.contexts, "busy", user(text))
            except grpc.RpcError as exc:
                failures.append(exc.code())
                continue
            acked.append((r.incarnation, r.version, text))

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    took = []
    try:
        for _ in range(3):
            time.sleep(0.3)
            started = time.monotonic()
            # False only while the writer's new conversation has its head but
            # not yet its first turn (nothing to delete then): a window of one
            # store round trip, longer on a loaded machine, so ask again.
            deadline = started + 15
            while not b.contexts.DeleteContext(pb.DeleteContextRequest(context_id="busy")).deleted:
                if time.monotonic() > deadline:
                    pytest.fail("the delete never met a conversation in 15 s")
                time.sleep(0.02)
            took.append(time.monotonic() - started)
        time.sleep(0.3)
    finally:
        stop.set()
        writer.join(30)
    print(f"delete under a steady writer ({backend}): " + ", ".join(f"{t:.3f}s" for t in took))
    assert not failures, failures
    # Three deletes: the writer's turns span four incarnations after the first.
    incarnations = list(dict.fromkeys(inc for inc, _, _ in acked))
    assert len(incarnations) >= 3, incarnations
    # Every turn acknowledged in the live conversation is in it, in order.
    last = incarnations[-1]
    mine = [text for inc, _, text in acked if inc == last]
    for c in (a.contexts, b.contexts):
        assert texts(full(c, "busy")) == mine
