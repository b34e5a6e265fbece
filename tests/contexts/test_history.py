"""Earlier versions of a context: GetContextRequest.at_version and
ListVersions on every store, through checkpoints, compaction, truncation,
plan changes, restarts, expiry of what history keeps, and deletion."""

from __future__ import annotations

import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.support.contexts import append, assistant, bad_field, rpc_error, user

STORES = ["memory", "lmdb", "s3", "postgres"]


def run(r, coro):
    return r.extra["handle"].call(coro, timeout=120)


def service_of(r):
    return r.extra["sidecar"].domain.contexts


def read(stub, cid, version=0, **kw):
    kw.setdefault("view", pb.CONTEXT_VIEW_SLICE)
    return stub.GetContext(pb.GetContextRequest(context_id=cid, at_version=version, **kw))


def snapshot(resp):
    return resp.SerializeToString()


def build(stub, cid, r) -> dict[int, tuple]:
    """A conversation changed every way; each version's reads as they were then."""
    seen: dict[int, tuple] = {}

    def keep():
        views = [
            read(stub, cid),
            read(stub, cid, view=pb.CONTEXT_VIEW_FULL),
            read(stub, cid, format=pb.MESSAGE_FORMAT_OPENAI, last_n=2),
            read(stub, cid, format=pb.MESSAGE_FORMAT_ANTHROPIC),
            read(stub, cid, page_size=2),
        ]
        seen[views[0].info.version] = tuple(snapshot(v) for v in views)

    for i in range(6):
        append(stub, cid, user(f"question {i} " + "words " * 40))
        keep()
        append(stub, cid, assistant(f"answer {i} " + "more " * 40))
        keep()
        if i == 2:
            stub.Compact(pb.CompactRequest(context_id=cid, keep_last=2))
            keep()
        if i == 3:
            stub.TruncateContext(pb.TruncateContextRequest(context_id=cid, count=1))
            keep()
        if i == 4:
            stub.UpdatePlan(
                pb.UpdatePlanRequest(
                    context_id=cid,
                    create=pb.PlanCreate(goal="fix it", items=[pb.PlanItemSpec(title="look")]),
                )
            )
            keep()
        run(r, service_of(r).janitor.drain(60))
    return seen


def again(stub, cid, version):
    return (
        read(stub, cid, version),
        read(stub, cid, version, view=pb.CONTEXT_VIEW_FULL),
        read(stub, cid, version, format=pb.MESSAGE_FORMAT_OPENAI, last_n=2),
        read(stub, cid, version, format=pb.MESSAGE_FORMAT_ANTHROPIC),
        read(stub, cid, version, page_size=2),
    )


@pytest.mark.parametrize("backend", STORES)
def test_every_version_reads_as_it_was_then(start_sidecar, store_uri_for, backend):
    r = start_sidecar(store_uri_for(backend), contexts__checkpoint_every=3)
    stub, cid = r.contexts, "hist-a"
    seen = build(stub, cid, r)
    assert len(seen) > 10
    for version, views in seen.items():
        got = tuple(snapshot(v) for v in again(stub, cid, version))
        assert got == views, f"version {version} reads differently now"
    # a later page of an old version goes on from its first page
    first = read(stub, cid, 3, page_size=1)
    nxt = stub.GetContext(
        pb.GetContextRequest(
            context_id=cid,
            view=pb.CONTEXT_VIEW_SLICE,
            at_version=3,
            page_size=1,
            page_token=first.next_page_token,
        )
    )
    assert nxt.info.version == 3 and len(first.slice) + len(nxt.slice) >= 2


@pytest.mark.parametrize("backend", ["lmdb", "postgres"])
def test_versions_stay_readable_after_a_restart(start_sidecar, store_uri_for, backend):
    """(Folded messages are not archived: the segments only history needs are held.)"""
    uri, settings = store_uri_for(backend), {"contexts__checkpoint_every": 3}
    settings["compaction__archive_ttl"] = 0
    r = start_sidecar(uri, **settings)
    seen = build(r.contexts, "hist-b", r)
    r.extra["handle"].close()
    r2 = start_sidecar(uri, **settings)
    for version, views in seen.items():
        assert tuple(snapshot(v) for v in again(r2.contexts, "hist-b", version)) == views


def test_bad_versions_answer_the_right_status(start_sidecar, store_uri_for):
    r = start_sidecar(store_uri_for("lmdb"))
    stub = r.contexts
    append(stub, "hist-c", user("hi"))
    append(stub, "hist-c", user("again"))
    err = rpc_error(read, stub, "hist-c", 3)
    assert err.code() == grpc.StatusCode.OUT_OF_RANGE and "version 2" in err.details()
    err = rpc_error(read, stub, "hist-c", -1)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and bad_field(err) == "at_version"
    err = rpc_error(read, stub, "hist-c", 1, since_version=1)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and bad_field(err) == "at_version"
    req = pb.AppendTurnRequest(context_id="hist-c", messages=[user("x")])
    req.read.at_version = 1
    err = rpc_error(stub.AppendTurn, req)
    assert bad_field(err) == "read.at_version"
    assert read(stub, "hist-c").info.version == 2, "a refused turn changed the context"
    err = rpc_error(read, stub, "nobody", 1)
    assert err.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("backend", ["lmdb", "s3"])
def test_versions_older_than_history_ttl_are_refused_naming_the_oldest_kept(
    start_sidecar, store_uri_for, backend
):
    r = start_sidecar(
        store_uri_for(backend), contexts__checkpoint_every=2, contexts__history_ttl=1.0
    )
    stub, svc, cid = r.contexts, service_of(r), "hist-d"
    for i in range(4):
        append(stub, cid, user(f"early {i}"))
    assert read(stub, cid, 1).info.version == 1
    time.sleep(1.2)
    for i in range(4):
        append(stub, cid, user(f"late {i}"))
    run(r, svc.checkpoint_now(cid))
    run(r, svc.janitor.drain(60))
    oldest = stub.ListVersions(pb.ListVersionsRequest(context_id=cid)).oldest_kept
    assert 4 < oldest <= 8
    err = rpc_error(read, stub, cid, 1)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"oldest kept is {oldest}" in err.details()
    assert len(read(stub, cid, oldest).slice) == oldest
    # nothing but the kept copies is stored
    keys = run(r, svc.storage.list(f"context-hist/{cid}/"))
    assert keys and all(int(k.rsplit("/", 1)[1]) >= oldest for k in keys)


def test_without_history_only_the_latest_is_readable(start_sidecar, store_uri_for):
    r = start_sidecar(store_uri_for("lmdb"), contexts__history_ttl=0)
    stub = r.contexts
    append(stub, "hist-e", user("hi"))
    append(stub, "hist-e", user("again"))
    err = rpc_error(read, stub, "hist-e", 1)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "oldest kept is 2" in err.details()
    assert read(stub, "hist-e", 2).info.version == 2


@pytest.mark.parametrize("backend", STORES)
def test_list_versions_pages_newest_first_with_each_versions_size(
    start_sidecar, store_uri_for, backend
):
    r = start_sidecar(store_uri_for(backend), contexts__checkpoint_every=3)
    stub, cid = r.contexts, "hist-f"
    seen = build(stub, cid, r)
    got, token = [], ""
    while True:
        page = stub.ListVersions(
            pb.ListVersionsRequest(context_id=cid, page_size=4, page_token=token)
        )
        assert len(page.versions) <= 4
        got += page.versions
        token = page.next_page_token
        if not token:
            break
    latest = read(stub, cid).info.version
    assert [v.version for v in got] == list(range(latest, 0, -1))
    assert page.oldest_kept == 1
    kinds = {v.kind for v in got}
    assert {"turn", "compaction", "truncate", "plan"} <= kinds, kinds
    for v in got:
        info = read(stub, cid, v.version, view=pb.CONTEXT_VIEW_INFO).info
        assert (v.message_count, v.est_tokens) == (info.message_count, info.est_tokens)
        assert v.created_ms > 0
    assert set(seen) <= {v.version for v in got}
    err = rpc_error(stub.ListVersions, pb.ListVersionsRequest(context_id=cid, page_token="x"))
    assert bad_field(err) == "page_token"


def test_a_deleted_context_leaves_no_history(start_sidecar, store_uri_for):
    r = start_sidecar(store_uri_for("lmdb"), contexts__checkpoint_every=2)
    stub, svc = r.contexts, service_of(r)
    for i in range(5):
        append(stub, "hist-g", user(f"turn {i}"))
    run(r, svc.checkpoint_now("hist-g"))
    stub.DeleteContext(pb.DeleteContextRequest(context_id="hist-g"))
    run(r, svc.janitor.drain(60))
    for prefix in ("context-hist/hist-g/", "context-seg/hist-g/", "context-log/hist-g/"):
        assert run(r, svc.storage.list(prefix)) == [], prefix
