"""Replicas on one bucket, as a fleet behind a load balancer uses them: turn N
through sidecar A, turn N+1 through sidecar B. Every read on any replica
reflects what any replica acknowledged; a delete is fenced, so no replica
acknowledges a turn that a delete then eats; watchers see other replicas'
changes. Real ``ctxd serve`` processes on one moto S3 server over HTTP."""

from __future__ import annotations

import queue
import threading
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.contexts.test_contexts import append, full, rpc_error, texts, user

BACKENDS = ["s3", "s3-nolist"]


def replicas(spawn_sidecar, uri: str, n: int = 2, *extra: str):
    return [spawn_sidecar("--store", uri, *extra).running() for _ in range(n)]


def version(c, cid: str) -> int:
    return c.GetContext(
        pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_INFO)
    ).info.version


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_read_on_b_reflects_a_write_on_a(spawn_sidecar, store_uri_for, backend):
    a, b = replicas(spawn_sidecar, store_uri_for(backend))
    append(a.contexts, "conv", user("turn 1 via A"))
    assert texts(full(b.contexts, "conv")) == ["turn 1 via A"]  # B now holds a copy
    append(a.contexts, "conv", user("turn 2 via A"))
    append(a.contexts, "conv", user("turn 3 via A"))

    c = b.contexts
    assert texts(full(c, "conv")) == ["turn 1 via A", "turn 2 via A", "turn 3 via A"]
    sl = c.GetContext(pb.GetContextRequest(context_id="conv", view=pb.CONTEXT_VIEW_SLICE))
    assert [m.user.text for m in sl.slice][-1] == "turn 3 via A" and sl.info.version == 3
    assert c.RenderPrompt(pb.RenderPromptRequest(context_id="conv")).version == 3
    listed = {i.id: i.version for i in c.ListContexts(pb.ListContextsRequest()).contexts}
    assert listed["conv"] == 3
    plan = c.PlanCompaction(pb.PlanCompactionRequest(context_id="conv", keep_last=1))
    assert plan.base_version == 3 and plan.fold_count == 2
    # And the next turn through B follows A's without an expected_version race.
    assert append(c, "conv", user("turn 4 via B"), expected_version=3).version == 4
    assert texts(full(a.contexts, "conv"))[-1] == "turn 4 via B"


def test_a_turns_read_on_b_holds_what_a_acknowledged(spawn_sidecar, store_uri_for):
    """AppendTurn's own read (one round trip) reflects the other replica's
    turns, for a committed turn and for a replayed one."""
    a, b = replicas(spawn_sidecar, store_uri_for("s3"))
    append(a.contexts, "one", user("a1"))
    held = version(b.contexts, "one")  # B holds version 1
    append(a.contexts, "one", user("a2"))
    slice_since = pb.GetContextRequest(view=pb.CONTEXT_VIEW_SLICE, since_version=held)
    req = pb.AppendTurnRequest(
        context_id="one", messages=[user("b3")], idempotency_key="k", read=slice_since
    )
    r = b.contexts.AppendTurn(req)
    assert r.read.change == pb.SLICE_CHANGE_APPEND
    assert [m.user.text for m in r.read.slice] == ["a2", "b3"]
    append(a.contexts, "one", user("a4"))
    again = b.contexts.AppendTurn(req)  # a retry: appends nothing, reads the latest
    assert again.replayed and again.version == r.version
    assert [m.user.text for m in again.read.slice] == ["a2", "b3", "a4"]


def test_cached_reads_are_an_explicit_choice(spawn_sidecar, store_uri_for):
    uri = store_uri_for("s3")
    a = spawn_sidecar("--store", uri).running()
    b = spawn_sidecar("--store", uri, "--set", "contexts.read_consistency=cached").running()
    append(a.contexts, "conv", user("one"))
    assert version(b.contexts, "conv") == 1
    append(a.contexts, "conv", user("two"))
    # B was told to serve its own copy: it may lag (here it does, until it writes).
    assert version(b.contexts, "conv") == 1
    assert append(b.contexts, "conv", user("three")).version == 3
    assert texts(full(b.contexts, "conv")) == ["one", "two", "three"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_delete_on_a_never_eats_turns_b_acknowledges(spawn_sidecar, store_uri_for, backend):
    uri = store_uri_for(backend)
    a, b = replicas(spawn_sidecar, uri)
    append(a.contexts, "conv", user("before the delete"))
    assert version(b.contexts, "conv") == 1  # B holds the old incarnation
    assert a.contexts.DeleteContext(pb.DeleteContextRequest(context_id="conv")).deleted
    assert rpc_error(full, b.contexts, "conv").code() == grpc.StatusCode.NOT_FOUND

    acked = [append(b.contexts, "conv", user(f"after {i}")).version for i in range(5)]
    # The id starts a new conversation; each acknowledged turn is in it.
    assert acked == [1, 2, 3, 4, 5]
    fresh = spawn_sidecar("--store", uri).running()
    for r in (a, b, fresh):
        assert texts(full(r.contexts, "conv")) == [f"after {i}" for i in range(5)]
    listed = [i.id for i in fresh.contexts.ListContexts(pb.ListContextsRequest()).contexts]
    assert "conv" in listed


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_replica_that_saw_the_delete_sees_the_id_created_again(
    spawn_sidecar, store_uri_for, backend
):
    """A learns of B's delete through a read; B then starts the id afresh.
    A's reads and changes follow the new conversation, not its deleted copy."""
    a, b = replicas(spawn_sidecar, store_uri_for(backend))
    append(a.contexts, "conv", user("one"))
    append(b.contexts, "conv", user("two"))
    assert version(a.contexts, "conv") == 2
    assert b.contexts.DeleteContext(pb.DeleteContextRequest(context_id="conv")).deleted
    assert rpc_error(full, a.contexts, "conv").code() == grpc.StatusCode.NOT_FOUND
    for text in ("new 1", "new 2", "new 3"):
        append(b.contexts, "conv", user(text))

    assert texts(full(a.contexts, "conv")) == ["new 1", "new 2", "new 3"]
    assert version(a.contexts, "conv") == 3
    assert rpc_error(full, b.contexts, "other").code() == grpc.StatusCode.NOT_FOUND
    # A change through A (not a turn) finds the new conversation too.
    b.contexts.DeleteContext(pb.DeleteContextRequest(context_id="conv"))
    assert rpc_error(full, a.contexts, "conv").code() == grpc.StatusCode.NOT_FOUND
    append(b.contexts, "conv", user("newer"))
    preflight = pb.SetPreflightRequest(context_id="conv", verdict_json='{"ok": true}')
    assert a.contexts.SetPreflight(preflight).version == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_delete_checks_expected_version_against_the_store(spawn_sidecar, store_uri_for, backend):
    a, b = replicas(spawn_sidecar, store_uri_for(backend))
    append(a.contexts, "conv", user("v1"))
    assert version(a.contexts, "conv") == 1
    for i in range(3):
        append(b.contexts, "conv", user(f"v{i + 2}"))
    err = rpc_error(
        a.contexts.DeleteContext, pb.DeleteContextRequest(context_id="conv", expected_version=1)
    )
    assert err.code() == grpc.StatusCode.ABORTED and "version 4" in err.details()
    assert texts(full(b.contexts, "conv")) == ["v1", "v2", "v3", "v4"]
    req = pb.DeleteContextRequest(context_id="conv", expected_version=4)
    assert a.contexts.DeleteContext(req).deleted
    assert rpc_error(full, b.contexts, "conv").code() == grpc.StatusCode.NOT_FOUND


def test_a_watcher_on_b_sees_what_a_commits(spawn_sidecar, store_uri_for):
    a, b = replicas(spawn_sidecar, store_uri_for("s3"))
    append(a.contexts, "conv", user("hello"))
    events: queue.Queue = queue.Queue()
    call = b.contexts.WatchContext(pb.WatchContextRequest(context_id="conv"))

    def read() -> None:
        try:
            for ev in call:
                events.put((ev.kind, ev.version, time.monotonic()))
        except grpc.RpcError:
            pass

    threading.Thread(target=read, daemon=True).start()
    time.sleep(0.5)
    for i in range(3):
        append(a.contexts, "conv", user(f"turn {i} via A"))
    a.contexts.Compact(pb.CompactRequest(context_id="conv", keep_last=1))
    a.contexts.DeleteContext(pb.DeleteContextRequest(context_id="conv"))
    seen = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (
        not seen or seen[-1][0] != pb.CONTEXT_EVENT_KIND_DELETED
    ):
        try:
            seen.append(events.get(timeout=1))
        except queue.Empty:
            pass
    kinds = [k for k, _, _ in seen]
    assert kinds == [pb.CONTEXT_EVENT_KIND_TURN] * 3 + [
        pb.CONTEXT_EVENT_KIND_COMPACTION,
        pb.CONTEXT_EVENT_KIND_DELETED,
    ], seen
    assert [v for _, v, _ in seen[:4]] == [2, 3, 4, 5]
    call.cancel()


def test_a_replica_killed_mid_delete_loses_no_later_turn(spawn_sidecar, store_uri_for):
    uri = store_uri_for("s3-nolist")
    a = spawn_sidecar("--store", uri, env={"CTXD_CRASH_POINT": "contexts.after_fence"})
    b = spawn_sidecar("--store", uri).running()
    append(a.running().contexts, "conv", user("old"))
    assert version(b.contexts, "conv") == 1
    with pytest.raises(grpc.RpcError):
        a.running().contexts.DeleteContext(pb.DeleteContextRequest(context_id="conv"), timeout=10)
    assert a.proc.wait(10) == 70  # killed between the fence and the head's removal
    assert append(b.contexts, "conv", user("new")).version == 1
    a.env.pop("CTXD_CRASH_POINT")
    a.start()  # finishes the interrupted deletion: the new conversation stays
    for r in (a.running(), b, spawn_sidecar("--store", uri).running()):
        assert texts(full(r.contexts, "conv")) == ["new"]
