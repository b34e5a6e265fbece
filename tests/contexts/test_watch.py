"""WatchContext: events for turns, plans, compactions and deletion, over
gRPC on LMDB and S3 (moto); clean ends; bounded per-watcher queues."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.contexts.events import Subscription, WatchEvent
from tests.compaction.test_compaction_rpcs import Watcher, append, apply, plan, tool_turn, user

K = pb.ContextEventKind


@pytest.fixture(params=["lmdb", "s3"])
def uri(request, store_uri_for) -> str:
    return store_uri_for(request.param)


def test_watch_streams_turns_plans_compactions_and_ends_on_delete(start_sidecar, uri):
    sc = start_sidecar(uri)
    for i in range(3):
        tool_turn(sc, "w", i, size=40)
    w = Watcher(sc, "w")
    r = append(sc, "w", user("hello"))
    ev = w.next()
    assert (ev.kind, ev.context_id, ev.version) == (K.Value("CONTEXT_EVENT_KIND_TURN"), "w", 4)
    assert ev.tokens_after == r.est_tokens and ev.ts_ms > 0
    sc.contexts.UpdatePlan(
        pb.UpdatePlanRequest(
            context_id="w", create=pb.PlanCreate(goal="g", items=[pb.PlanItemSpec(title="t")])
        )
    )
    ev = w.next()
    assert (ev.kind, ev.version) == (pb.CONTEXT_EVENT_KIND_PLAN, 5)
    p = plan(sc, "w", keep_last=2)
    a = apply(sc, "w", p.plan_ref, {"facts": ["f"]})
    ev = w.next()
    assert ev.kind == pb.CONTEXT_EVENT_KIND_COMPACTION
    assert (ev.version, ev.folded) == (a.version, a.folded)
    assert (ev.tokens_before, ev.tokens_after) == (a.tokens_before, a.tokens_after)
    sc.contexts.DeleteContext(pb.DeleteContextRequest(context_id="w"))
    ev = w.next()
    assert ev.kind == pb.CONTEXT_EVENT_KIND_DELETED
    assert w.next() is None  # the stream ended cleanly (no error)
    w.thread.join(5)
    assert not sc.extra["sidecar"].domain.contexts.feed.watched


def test_watch_ends_when_the_client_cancels(start_sidecar, uri):
    sc = start_sidecar(uri)
    append(sc, "c", user("hi"))
    feed = sc.extra["sidecar"].domain.contexts.feed
    watchers = [Watcher(sc, "c") for _ in range(2)]
    assert feed.watchers("c") == 2
    watchers[0].close()
    deadline = time.monotonic() + 10
    while feed.watchers("c") != 1:
        assert time.monotonic() < deadline, "cancelled watcher still subscribed"
        time.sleep(0.01)
    append(sc, "c", user("again"))
    assert watchers[1].next().version == 2
    watchers[1].close()


def test_watch_rejects_unknown_and_invalid_contexts(start_sidecar, uri):
    sc = start_sidecar(uri)
    for cid, code in [
        ("nope", grpc.StatusCode.NOT_FOUND),
        ("bad/id", grpc.StatusCode.INVALID_ARGUMENT),
    ]:
        call = sc.contexts.WatchContext(pb.WatchContextRequest(context_id=cid))
        with pytest.raises(grpc.RpcError) as info:
            next(iter(call))
        assert info.value.code() == code


def test_a_slow_watcher_loses_its_oldest_events_not_memory():
    async def run():
        sub = Subscription("x", maxlen=3)
        for v in range(1, 11):
            sub.push(WatchEvent("x", "turn", v, v))
        sub.push(WatchEvent("x", "deleted", 11, 11))
        return [ev async for ev in sub]

    got = asyncio.run(run())
    assert [e.version for e in got] == [9, 10, 11]
    assert "8 earlier events dropped" in got[0].detail
    assert got[1].detail == ""
