"""ForkContext on every store: a fork holds the source as of a version, is
independent afterwards, is written copy-on-write (it shares the source's
sealed segments), and survives the deletion of its source; replicas read and
extend one another's forks."""

from __future__ import annotations

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.support.contexts import append, assistant, bad_field, rpc_error, user

STORES = ["memory", "lmdb", "s3", "postgres"]


def run(r, coro):
    return r.extra["handle"].call(coro, timeout=120)


def service_of(r):
    return r.extra["sidecar"].domain.contexts


def fork(stub, src, new, at=0, key=""):
    return stub.ForkContext(
        pb.ForkContextRequest(source_id=src, at_version=at, context_id=new, idempotency_key=key)
    ).info


def full(stub, cid, at=0):
    return stub.GetContext(
        pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_FULL, at_version=at)
    )


def texts(resp):
    return [m.user.text or m.assistant.text for m in resp.context.messages]


def conversation(r, stub, cid, turns=12):
    for i in range(turns):
        append(stub, cid, user(f"q{i} " + "x" * 200))
        append(stub, cid, assistant(f"a{i}"))
        if i == 5:
            stub.Compact(pb.CompactRequest(context_id=cid, keep_last=4))
    run(r, service_of(r).janitor.drain(60))


@pytest.mark.parametrize("backend", STORES)
def test_a_fork_holds_the_source_at_a_version_and_parts_from_it(
    start_sidecar, store_uri_for, backend
):
    uri = store_uri_for(backend)
    r = start_sidecar(uri, contexts__checkpoint_every=4, contexts__fence_hold=0)
    stub, svc = r.contexts, service_of(r)
    conversation(r, stub, "src")
    then = full(stub, "src", 15)
    info = fork(stub, "src", "f1", at=15)
    assert (info.forked_from, info.forked_at_version, info.version) == ("src", 15, 16)
    got = full(stub, "f1")
    assert texts(got) == texts(then)
    assert got.context.summary == then.context.summary
    assert got.info.forked_from == "src" and got.info.message_count == then.info.message_count
    latest = fork(stub, "src", "f2")
    assert latest.forked_at_version == full(stub, "src").info.version
    want_f2 = texts(full(stub, "f2"))
    # independent afterwards, both ways
    append(stub, "f1", user("only in the fork"))
    append(stub, "src", user("only in the source"))
    stub.TruncateContext(pb.TruncateContextRequest(context_id="src", count=3))
    assert texts(full(stub, "f1"))[-1] == "only in the fork"
    assert "only in the fork" not in texts(full(stub, "src"))
    assert texts(full(stub, "f1"))[:-1] == texts(then)
    # a fork of a fork, then the source and the middle one deleted
    append(stub, "f1", user("more"))
    fork(stub, "f1", "f3")
    run(r, svc.checkpoint_now("f1"))
    want_f3 = texts(full(stub, "f3"))
    for cid in ("src", "f1"):
        stub.DeleteContext(pb.DeleteContextRequest(context_id=cid))
    run(r, svc.janitor.drain(60))
    if backend != "memory":  # read back from the store alone
        r.extra["handle"].close()
        r = start_sidecar(uri, contexts__fence_hold=0)
    stub = r.contexts
    assert texts(full(stub, "f3")) == want_f3
    assert texts(full(stub, "f2")) == want_f2
    append(stub, "f3", user("f3 goes on"))
    stub.Compact(pb.CompactRequest(context_id="f3", keep_last=2))
    append(stub, "f3", user("and on"))
    run(r, service_of(r).checkpoint_now("f3"))
    run(r, service_of(r).janitor.drain(60))
    assert texts(full(stub, "f3"))[-2:] == ["f3 goes on", "and on"]
    assert texts(full(stub, "f2")) == want_f2


@pytest.mark.parametrize("backend", ["lmdb", "s3"])
def test_a_fork_writes_about_a_turn_and_what_no_branch_reads_is_reclaimed(
    start_sidecar, store_uri_for, backend
):
    r = start_sidecar(store_uri_for(backend), contexts__checkpoint_every=8, contexts__fence_hold=0)
    stub, svc = r.contexts, service_of(r)
    conversation(r, stub, "big", turns=60)
    run(r, svc.checkpoint_now("big"))
    before = set(run(r, svc.storage.list("")))
    fork(stub, "big", "small")
    written = set(run(r, svc.storage.list(""))) - before
    assert len(written) <= 8, sorted(written)  # head, its copy, references; no segment copied
    assert not [k for k in written if k.startswith("context-seg/big/")]
    stub.DeleteContext(pb.DeleteContextRequest(context_id="big"))
    run(r, svc.janitor.drain(60))
    assert run(r, svc.storage.list("context-seg/big/")), "segments a fork reads were deleted"
    assert len(full(stub, "small").context.messages) > 0
    stub.DeleteContext(pb.DeleteContextRequest(context_id="small"))
    run(r, svc.janitor.drain(60))
    left = [k for k in run(r, svc.storage.list("")) if "big" in k or "small" in k]
    assert left == [], left


def test_fork_refusals_and_retries(start_sidecar, store_uri_for):
    r = start_sidecar(store_uri_for("lmdb"))
    stub = r.contexts
    append(stub, "s", user("one"))
    append(stub, "s", user("two"))
    append(stub, "taken", user("x"))
    err = rpc_error(fork, stub, "s", "taken")
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS
    err = rpc_error(fork, stub, "nobody", "n1")
    assert err.code() == grpc.StatusCode.NOT_FOUND
    err = rpc_error(fork, stub, "s", "n1", at=9)
    assert err.code() == grpc.StatusCode.OUT_OF_RANGE
    err = rpc_error(fork, stub, "s", "n1", at=-1)
    assert bad_field(err) == "at_version"
    err = rpc_error(fork, stub, "s", "")
    assert bad_field(err) == "context_id"
    first = fork(stub, "s", "n1", at=1, key="k1")
    again = fork(stub, "s", "n1", at=1, key="k1")
    assert first == again
    err = rpc_error(fork, stub, "s", "n1", key="k2")
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS
    assert texts(full(stub, "n1")) == ["one"]
    versions = stub.ListVersions(pb.ListVersionsRequest(context_id="n1"))
    assert [(v.version, v.kind) for v in versions.versions] == [(2, "fork")]
    assert versions.oldest_kept == 2
    err = rpc_error(full, stub, "n1", 1)  # before the fork: read it from the source
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize("backend", ["s3", "postgres"])
def test_a_fork_made_on_one_replica_is_read_and_extended_on_another(
    start_sidecar, store_uri_for, backend
):
    uri = store_uri_for(backend)
    a = start_sidecar(uri, contexts__checkpoint_every=4)
    b = start_sidecar(uri, contexts__checkpoint_every=4)
    conversation(a, a.contexts, "rs", turns=6)
    fork(a.contexts, "rs", "rf", at=7)
    assert texts(full(b.contexts, "rf")) == texts(full(a.contexts, "rs", 7))
    append(b.contexts, "rf", user("from b"))
    assert texts(full(a.contexts, "rf"))[-1] == "from b"
    assert "from b" not in texts(full(a.contexts, "rs"))
