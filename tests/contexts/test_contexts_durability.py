"""Contexts survive restarts and cache evictions: checkpoints, log replay,
idempotency after a restart, the registry's caps, idle expiry."""

from __future__ import annotations

import asyncio
import json
import random
import time

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.contexts.persistence import head_key, log_key
from tests.support.contexts import (
    append,
    assistant,
    estimate,
    full,
    info,
    list_all,
    rpc_error,
    texts,
    tool_json,
    user,
)


def run(r, coro):
    # Longer than any drain below: a drain that runs out answers False itself.
    return r.extra["handle"].call(coro, timeout=180)


def service_of(r):
    return r.extra["sidecar"].domain.contexts


def stored(r, key: str):
    item = run(r, service_of(r).storage.get(key))
    return None if item is None else json.loads(item.value)


def random_turn(rng: random.Random, i: int) -> list[pb.Message]:
    """A turn of 1-4 messages of varying size, sometimes with a tool round."""
    msgs = [user(f"u{i} " + "x" * rng.randrange(0, 300))]
    if rng.random() < 0.3:
        call = f"c{i}"
        msgs.append(assistant("", (call, "lookup", json.dumps({"i": i}))))
        msgs.append(tool_json(call, "lookup", json.dumps({"r": "y" * rng.randrange(0, 200)})))
    if rng.random() < 0.7:
        msgs.append(assistant(f"a{i} " + "z" * rng.randrange(0, 500)))
    return msgs


def message_tokens(m: pb.Message) -> int:
    """SPEC §2 estimate, computed independently of the sidecar."""
    kind = m.WhichOneof("kind")
    body = getattr(m, kind)
    if kind == "tool":
        return estimate(body.json or body.text) + 4
    n = estimate(body.text) + 4
    for call in getattr(body, "tool_calls", ()):
        n += estimate(call.name) + estimate(call.arguments_json)
    return n


# -- restart ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["lmdb", "s3"])
@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_restore_after_restart(spawn_sidecar, store_uri_for, backend, stop):
    uri = store_uri_for(backend)
    args = ("--store", uri, "--set", "contexts.checkpoint_every=8")
    sc = spawn_sidecar(*args)
    c = sc.running().contexts
    rng = random.Random(7)
    for i in range(45):
        append(c, "conv", *random_turn(rng, i), idempotency_key=f"k{i}", principal="bob")
    append(c, "root", user("root turn"))
    usage = c.RecordUsage(pb.RecordUsageRequest(context_id="conv", input_tokens=50_000))
    append(c, "conv", user("after usage"), idempotency_key="k-last")
    before = full(c, "conv")
    root_before = full(c, "root")
    listing = list_all(c)
    if stop == "sigterm":
        assert sc.terminate() == 0
    else:
        sc.kill()

    sc2 = spawn_sidecar(*args)
    c2 = sc2.running().contexts
    assert full(c2, "conv") == before
    assert full(c2, "root") == root_before
    assert list_all(c2) == listing
    assert before.est_tokens > 0 and usage.calibration != 1.0
    # Idempotency keys outlive the process.
    again = append(c2, "conv", user("dup"), idempotency_key="k3")
    assert again.replayed and again.version == 4
    nxt = append(c2, "conv", user("more"))
    assert nxt.version == before.version + 1
    assert texts(full(c2, "conv"))[-1] == "more"


# -- checkpoints and replay ------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["memory", "lmdb", "s3", "s3-nolist"])
def test_many_turns_checkpoint_and_replay(start_sidecar, store_uri_for, backend):
    """300 turns with a checkpoint every 5 versions; the context is evicted
    and restored from segments + log tail over and over, always whole."""
    r = start_sidecar(
        store_uri_for(backend),
        contexts__checkpoint_every=5,
        contexts__cache_max_contexts=1,
        contexts__history_ttl=0,  # (history keeps the records; tests/contexts/test_history.py)
    )
    c = r.contexts
    rng = random.Random(42)
    expected: list[str] = []
    for i in range(300):
        turn = random_turn(rng, i)
        resp = append(c, "long", *turn)
        assert resp.version == i + 1
        expected.extend(m.user.text or m.assistant.text or m.tool.json for m in turn)
        if i % 37 == 0:
            append(c, f"other-{i}", user("evicts long"))  # cache holds one context
            ctx = full(c, "long")  # restored
            assert texts(ctx) == expected
            assert [m.id for m in ctx.messages] == [f"m{n}" for n in range(1, len(expected) + 1)]
    ctx = full(c, "long")
    assert ctx.version == 300 and ctx.turns == 300 and texts(ctx) == expected
    assert ctx.est_tokens == sum(message_tokens(m) for m in ctx.messages)
    # The head was checkpointed recently; older log records are sealed.
    run(r, service_of(r).checkpoint_now("long"))
    assert run(r, service_of(r).janitor.drain(120))
    head = stored(r, head_key("long"))
    assert head["version"] == 300 and len(head["segments"]) >= 300 // 5
    assert stored(r, log_key("long", head["gen"], 10)) == {"op": "sealed"}
    assert stored(r, log_key("long", head["gen"], 301)) is None


def test_turns_arriving_during_a_checkpoint_do_not_start_another(start_sidecar, store_uri_for):
    """A checkpoint is due every ``checkpoint_every`` versions. Turns committed
    while one is being written are below the threshold once it lands, so no
    second, nearly empty checkpoint (one more segment, one more head write)
    follows it."""
    every, turns = 16, 160
    r = start_sidecar(store_uri_for("lmdb"), contexts__checkpoint_every=every)
    c = r.contexts
    for i in range(turns):
        append(c, "steady", user(f"turn {i}"))
    assert run(r, service_of(r).janitor.drain(120))
    head = stored(r, head_key("steady"))
    sizes = [s[2] for s in head["segments"]]
    assert sum(sizes) == head["sealed_through"]
    assert all(n >= every for n in sizes), sizes
    assert len(sizes) >= turns // every - 1, sizes


def test_a_stale_head_is_caught_up_from_the_log(start_sidecar, store_uri_for):
    """Two sidecars on one bucket: the second appends behind the first's
    cached copy; the first notices at its next write and catches up."""
    uri = store_uri_for("s3")
    a = start_sidecar(uri).contexts
    b = start_sidecar(uri).contexts
    append(a, "shared", user("from a"))
    assert info(b, "shared").version == 1  # b restores it
    append(b, "shared", user("from b"))
    err = rpc_error(append, a, "shared", user("conditional"), expected_version=1)
    assert err.code() == grpc.StatusCode.ABORTED  # a caught up to version 2
    resp = append(a, "shared", user("from a again"))
    assert resp.version == 3
    assert texts(full(a, "shared")) == ["from a", "from b", "from a again"]
    append(b, "shared", user("b sees it"), expected_version=3)


@pytest.mark.parametrize("history", [0, 3600])
def test_a_writer_far_behind_cannot_reuse_sealed_versions(start_sidecar, store_uri_for, history):
    """The second sidecar's copy is older than the first one's checkpoint:
    its write of an old version meets a sealed record, so it restores the
    context from the newer head and appends after everything (or, while
    history keeps the records, meets the record and catches up from the log)."""
    uri = store_uri_for("s3")
    ra = start_sidecar(uri, contexts__checkpoint_every=2, contexts__history_ttl=history)
    a, b = ra.contexts, start_sidecar(uri, contexts__history_ttl=history).contexts
    append(a, "far", user("one"))
    assert info(b, "far").version == 1
    for i in range(6):
        append(a, "far", user(f"a{i}"))
    run(ra, service_of(ra).checkpoint_now("far"))
    assert run(ra, service_of(ra).janitor.drain(120))
    head = stored(ra, head_key("far"))
    assert head["version"] == 7
    assert (stored(ra, log_key("far", head["gen"], 2)) == {"op": "sealed"}) == (not history)
    resp = append(b, "far", user("from b"))
    assert resp.version == 8
    want = ["one", *[f"a{i}" for i in range(6)], "from b"]
    assert texts(full(b, "far")) == want
    assert texts(full(a, "far"))[:7] == want[:7]
    assert append(a, "far", user("a again")).version == 9  # a catches up too
    assert texts(full(a, "far")) == [*want, "a again"]


@pytest.mark.parametrize("backend", ["lmdb", "s3"])
def test_delete_leaves_no_keys_behind(start_sidecar, store_uri_for, backend):
    hold = 2.0
    r = start_sidecar(
        store_uri_for(backend), contexts__checkpoint_every=3, contexts__fence_hold=hold
    )
    c, svc = r.contexts, service_of(r)
    for i in range(20):
        append(c, "doomed", user(f"turn {i} " + "q" * 500))
        append(c, "kept", user(f"turn {i}"))
    run(r, svc.checkpoint_now("doomed"))
    deleted_at = time.monotonic()
    assert c.DeleteContext(pb.DeleteContextRequest(context_id="doomed")).deleted
    assert run(r, svc.janitor.drain(120))
    keys = run(r, svc.storage.list(""))
    left = [k for k in keys if "doomed" in k]
    if svc.storage.shared and time.monotonic() - deleted_at < hold:
        # Replicas share the store: every version of the deleted incarnation
        # stays taken (the fence is v21) and its trash record waits, a while.
        logs = sorted(int(k.rsplit("/", 1)[1]) for k in left if k.startswith("context-log/"))
        assert logs == list(range(1, 22)), left
        assert [k for k in left if k.startswith("context-trash/")], left
    deadline = time.monotonic() + hold + 30
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        run(r, svc.janitor.drain(120))
        left = [k for k in run(r, svc.storage.list("")) if "doomed" in k]
    keys = run(r, svc.storage.list(""))
    assert keys and not [k for k in keys if "doomed" in k]
    assert [k for k in keys if "/kept" in k]
    assert texts(full(c, "kept"))[-1] == "turn 19"


def test_a_stop_leaves_no_fence_timer_behind_and_a_restart_removes_the_fence(
    start_sidecar, store_uri_for
):
    """A purge the janitor finishes while the sidecar stops schedules no fence
    removal on a loop that is closing; the next start removes the fence."""
    uri = store_uri_for("s3")
    r = start_sidecar(uri, contexts__fence_hold=60)
    c, handle = r.contexts, r.extra["handle"]
    for i in range(5):
        append(c, "gone", user(f"turn {i}"))
    assert c.DeleteContext(pb.DeleteContextRequest(context_id="gone")).deleted
    handle.call(handle.sidecar.stop(grace=1))

    async def pending() -> list[str]:
        return [t.get_coro().__qualname__ for t in asyncio.all_tasks() if not t.done()]

    assert not [name for name in handle.call(pending()) if "_later" in name]
    handle.close()

    again = start_sidecar(uri, contexts__fence_hold=0.2)
    svc = service_of(again)
    deadline = time.monotonic() + 30
    left = ["?"]
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        run(again, svc.janitor.drain(120))
        left = [k for k in run(again, svc.storage.list("")) if "gone" in k]
    assert not left


# -- registry --------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["lmdb", "s3"])
def test_registry_caps_evict_and_restore_lazily(start_sidecar, store_uri_for, backend):
    r = start_sidecar(
        store_uri_for(backend), contexts__cache_max_contexts=3, contexts__cache_max_bytes=20_000
    )
    c = r.contexts
    svc = service_of(r)
    expected: dict[str, list[str]] = {f"c{i}": [] for i in range(8)}
    for round_ in range(6):
        for cid, msgs in expected.items():
            text = f"{cid} r{round_} " + "w" * 900
            append(c, cid, user(text))
            msgs.append(text)
            assert len(svc._registry) <= 3
            assert svc._registry.bytes <= 20_000
    assert svc._registry.evictions > 0
    for cid, msgs in expected.items():
        ctx = full(c, cid)
        assert texts(ctx) == msgs and ctx.version == 6
    assert {i.id: i.version for i in list_all(c) if i.id != "root"} == dict.fromkeys(expected, 6)


# -- idle expiry -----------------------------------------------------------------------------------
class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.mark.parametrize("backend", ["lmdb", "s3-nolist"])
def test_idle_conversations_are_archived(start_sidecar, store_uri_for, backend):
    uri = store_uri_for(backend)
    r = start_sidecar(uri, contexts__conversation_ttl=3600, contexts__on_expire="archive")
    c, svc = r.contexts, service_of(r)
    clock = svc.clock = Clock(1_000_000_000)
    append(c, "idle", user("old"))
    append(c, "root", user("root is never closed"))
    clock.now += 3_000_000
    append(c, "busy", user("recent"))
    clock.now += 1_000_000  # idle: 4000 s, busy: 1000 s
    assert run(r, r.extra["sidecar"].domain.expiry.expire_idle()) == 1
    assert [i.id for i in list_all(c)] == ["busy", "root"]
    archived = {i.id: i for i in list_all(c, include_archived=True)}
    assert archived["idle"].archived and not archived["busy"].archived
    assert texts(full(c, "idle")) == ["old"]  # kept and readable
    assert run(r, r.extra["sidecar"].domain.expiry.expire_idle()) == 0  # already archived
    # Durable: a fresh sidecar on the same store sees it archived too.
    if backend.startswith("s3"):
        other = start_sidecar(uri).contexts
        assert "idle" not in [i.id for i in list_all(other)]
    # A new turn reopens it.
    assert append(c, "idle", user("back")).version == 2
    assert [i.id for i in list_all(c)] == ["busy", "idle", "root"]
    assert not info(c, "idle").archived


def test_idle_conversations_are_deleted_when_configured(start_sidecar, store_uri_for):
    r = start_sidecar(
        store_uri_for("lmdb"), contexts__conversation_ttl=60, contexts__on_expire="delete"
    )
    c, svc = r.contexts, service_of(r)
    clock = svc.clock = Clock(5_000_000)
    for cid in ("a", "b", "root"):
        append(c, cid, user(cid))
    clock.now += 30_000
    append(c, "b", user("still here"))
    clock.now += 40_000  # a: 70 s idle, b: 40 s
    assert run(r, r.extra["sidecar"].domain.expiry.expire_idle()) == 1
    assert rpc_error(info, c, "a").code() == grpc.StatusCode.NOT_FOUND
    assert [i.id for i in list_all(c)] == ["b", "root"]
    clock.now += 10_000_000
    assert run(r, r.extra["sidecar"].domain.expiry.expire_idle()) == 1
    assert [i.id for i in list_all(c)] == ["root"]
    assert full(c, "root").version == 1
