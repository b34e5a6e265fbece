"""Reads of any context by a client with default channel options (4 MiB):
paged views, incremental slice reads whose cost is the turn, and the
lossless archive behind ExpandCompaction, over real gRPC on LMDB and S3."""

from __future__ import annotations

import json

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.compaction.test_compaction_rpcs import append, assistant, tool, user

DEFAULT_LIMIT = 4 * 1024 * 1024


@pytest.fixture(params=["lmdb", "s3"])
def backend(request) -> str:
    return request.param


def get(sc, cid: str, view=pb.CONTEXT_VIEW_SLICE, **kw) -> pb.GetContextResponse:
    return sc.contexts.GetContext(pb.GetContextRequest(context_id=cid, view=view, **kw))


def pages(sc, cid: str, view) -> list[pb.GetContextResponse]:
    out = [get(sc, cid, view)]
    while out[-1].next_page_token:
        out.append(get(sc, cid, view, page_token=out[-1].next_page_token))
    return out


def ids(resp: pb.GetContextResponse) -> list[str]:
    return [m.id for m in (resp.context.messages if resp.HasField("context") else resp.slice)]


def test_a_context_of_many_large_tool_results_reads_in_pages(start_sidecar, store_uri_for, backend):
    sc = start_sidecar(store_uri_for(backend), contexts__auto_compact=False)
    rounds = 18 if backend == "lmdb" else 6
    big = "x" * (1024 * 1024 - 64)
    append(sc, "big", user("collect every log"))
    for i in range(rounds):
        append(sc, "big", assistant("", (f"c{i}", "logs")))
        req = pb.AppendTurnRequest(
            context_id="big",
            messages=[pb.Message(tool=pb.ToolResult(call_id=f"c{i}", name="logs", text=big))],
        )
        sc.contexts.AppendTurn(req)
    want = [f"m{i}" for i in range(1, 2 * rounds + 2)]
    for view in (pb.CONTEXT_VIEW_FULL, pb.CONTEXT_VIEW_SLICE):
        got = pages(sc, "big", view)
        assert len(got) > 1
        assert all(r.ByteSize() < DEFAULT_LIMIT for r in got)
        assert [i for r in got for i in ids(r)] == want
        assert all(r.info.version == 2 * rounds + 1 for r in got)


JSON_FORMATS = [pb.MESSAGE_FORMAT_CTXD, pb.MESSAGE_FORMAT_OPENAI, pb.MESSAGE_FORMAT_ANTHROPIC]


def _strings(value) -> str:
    """Every string in a JSON value, joined (its texts, whatever the shape)."""
    if isinstance(value, str):
        return value + "\n"
    if isinstance(value, dict):
        value = list(value.values())
    return "".join(_strings(v) for v in value) if isinstance(value, list) else ""


def test_json_pages_fit_a_default_client_however_the_text_escapes(start_sidecar, tmp_path):
    """A control character is one byte stored and six in JSON (``\u0001``):
    pages in a provider's shape are cut by their JSON, and a message too big
    to fit any JSON reply alone is refused up front, storing nothing."""
    sc = start_sidecar(f"lmdb://{tmp_path / 'data'}", contexts__auto_compact=False)
    escapes = "\x01" * (500 * 1024)  # 0.5 MB stored, 3 MB as JSON
    for i in range(5):
        append(sc, "ctl", user(f"{i}{escapes}"))
    for fmt in JSON_FORMATS:
        got, token = [], ""
        while True:
            r = get(sc, "ctl", format=fmt, page_token=token)
            assert r.ByteSize() < DEFAULT_LIMIT
            got += json.loads(r.messages_json)
            if not (token := r.next_page_token):
                break
        assert len(got) == 5, fmt
        assert [_strings(m).count(escapes) for m in got] == [1] * 5, fmt
    too_big = pb.AppendTurnRequest(context_id="ctl", messages=[user("\x01" * (600 * 1024))])
    with pytest.raises(grpc.RpcError) as err:
        sc.contexts.AppendTurn(too_big)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "messages[0]" in err.value.details() and "as JSON" in err.value.details()
    assert get(sc, "ctl", view=pb.CONTEXT_VIEW_INFO).info.version == 5


def test_page_size_and_tokens_stay_put_under_appends(start_sidecar, store_uri_for, backend):
    sc = start_sidecar(store_uri_for(backend))
    for i in range(10):
        append(sc, "p", user(f"u{i}"), assistant(f"a{i}"))
    first = get(sc, "p", pb.CONTEXT_VIEW_FULL, page_size=7)
    assert ids(first) == [f"m{i}" for i in range(1, 8)]
    append(sc, "p", user("late"))  # appended between two pages
    rest = get(sc, "p", pb.CONTEXT_VIEW_FULL, page_size=100, page_token=first.next_page_token)
    assert ids(rest) == [f"m{i}" for i in range(8, 22)] and not rest.next_page_token
    # A compaction between two pages: the token is stale, the client starts over.
    first = get(sc, "p", pb.CONTEXT_VIEW_SLICE, page_size=5)
    sc.contexts.Compact(pb.CompactRequest(context_id="p", keep_last=4))
    with pytest.raises(grpc.RpcError) as err:
        get(sc, "p", pb.CONTEXT_VIEW_SLICE, page_token=first.next_page_token)
    assert err.value.code() == grpc.StatusCode.ABORTED
    for bad in ("nonsense", first.next_page_token[:-3] + "abc"):
        with pytest.raises(grpc.RpcError) as err:
            get(sc, "p", pb.CONTEXT_VIEW_SLICE, page_token=bad)
        assert err.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ABORTED)
    with pytest.raises(grpc.RpcError) as err:
        get(sc, "p", pb.CONTEXT_VIEW_SLICE, page_size=-1)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for bad in ({"consistency": 7}, {"since_version": -1}):
        with pytest.raises(grpc.RpcError) as err:
            get(sc, "p", pb.CONTEXT_VIEW_SLICE, **bad)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert next(iter(bad)) in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        sc.contexts.ExpandCompaction(pb.ExpandCompactionRequest(context_id="p"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "compaction_id" in err.value.details()


def test_an_incremental_read_returns_just_the_turn(start_sidecar, store_uri_for, backend):
    sc = start_sidecar(store_uri_for(backend))
    for i in range(30):
        append(sc, "inc", user(f"u{i}"), assistant(f"a{i}"))
    held = get(sc, "inc")
    assert held.change == pb.SLICE_CHANGE_UNSPECIFIED and len(held.slice) == 60
    v = held.info.version
    same = get(sc, "inc", since_version=v)
    assert same.change == pb.SLICE_CHANGE_NONE and not same.slice

    r = append(sc, "inc", user("next"), assistant("reply"))
    delta = get(sc, "inc", since_version=v)
    assert delta.change == pb.SLICE_CHANGE_APPEND
    assert [m.id for m in delta.slice] == list(r.message_ids)
    assert delta.info.version == r.version

    # A plan change reshapes the slice (its plan block): rebuild.
    sc.contexts.UpdatePlan(
        pb.UpdatePlanRequest(
            context_id="inc", create=pb.PlanCreate(goal="ship", items=[pb.PlanItemSpec(title="go")])
        )
    )
    whole = get(sc, "inc", since_version=r.version)
    assert whole.change == pb.SLICE_CHANGE_REPLACE and whole.slice[0].id == "plan"
    v = whole.info.version
    sc.contexts.Compact(pb.CompactRequest(context_id="inc", keep_last=4))
    whole = get(sc, "inc", since_version=v)
    assert whole.change == pb.SLICE_CHANGE_REPLACE
    assert [m.id for m in whole.slice][:2] == ["summary", "plan"] and len(whole.slice) == 6
    # A version the sidecar cannot relate to: rebuild too.
    future = get(sc, "inc", since_version=whole.info.version + 5)
    assert future.change == pb.SLICE_CHANGE_REPLACE


def texts(msgs) -> list[str]:
    return [m.user.text for m in msgs]


def test_a_read_since_a_version_of_a_deleted_conversation_replaces(start_sidecar, store_uri_for):
    sc = start_sidecar(store_uri_for("lmdb"), contexts__auto_compact=False)
    delete = pb.DeleteContextRequest(context_id="again")
    for t in ("old 1", "old 2"):
        append(sc, "again", user(t))
    held = get(sc, "again")
    v, old = held.info.version, held.info.incarnation
    assert v == 2 and old
    # Re-created up to the same version: the number alone says "nothing changed".
    sc.contexts.DeleteContext(delete)
    for t in ("NEW 1", "NEW 2"):
        append(sc, "again", user(t))
    r = get(sc, "again", since_version=v, since_incarnation=old)
    assert r.change == pb.SLICE_CHANGE_REPLACE, pb.SliceChange.Name(r.change)
    assert texts(r.slice) == ["NEW 1", "NEW 2"] and r.info.incarnation not in ("", old)
    # Re-created past it: the number alone says "append the newest message".
    sc.contexts.DeleteContext(delete)
    for t in ("NEW 1", "NEW 2", "NEW 3"):
        append(sc, "again", user(t))
    r = get(sc, "again", since_version=v, since_incarnation=old)
    assert r.change == pb.SLICE_CHANGE_REPLACE, pb.SliceChange.Name(r.change)
    assert texts(r.slice) == ["NEW 1", "NEW 2", "NEW 3"]
    turn = append(sc, "again", user("NEW 4"), read=slice_read(v, since_incarnation=old))
    assert turn.read.change == pb.SLICE_CHANGE_REPLACE, pb.SliceChange.Name(turn.read.change)
    assert texts(turn.read.slice) == ["NEW 1", "NEW 2", "NEW 3", "NEW 4"]
    assert turn.incarnation == turn.read.info.incarnation == r.info.incarnation
    # Within one incarnation, incremental reads work as before.
    nxt = append(
        sc,
        "again",
        user("NEW 5"),
        read=slice_read(turn.version, since_incarnation=turn.incarnation),
    )
    assert nxt.read.change == pb.SLICE_CHANGE_APPEND and texts(nxt.read.slice) == ["NEW 5"]
    same = get(sc, "again", since_version=nxt.version, since_incarnation=nxt.incarnation)
    assert same.change == pb.SLICE_CHANGE_NONE
    # A client that sends no incarnation gets the version alone, as before.
    assert get(sc, "again", since_version=v).change == pb.SLICE_CHANGE_APPEND


def slice_read(since: int | None = None, **kw) -> pb.GetContextRequest:
    if since is not None:
        kw["since_version"] = since
    return pb.GetContextRequest(view=pb.CONTEXT_VIEW_SLICE, **kw)


def test_a_turn_reads_what_goes_to_the_model_next_in_the_same_call(
    start_sidecar, store_uri_for, backend
):
    sc = start_sidecar(store_uri_for(backend))
    for i in range(10):
        append(sc, "one", user(f"u{i}"), assistant(f"a{i}"))
    v = get(sc, "one").info.version
    r = append(sc, "one", user("next"), assistant("reply"), read=slice_read(v))
    assert r.HasField("read") and r.read.change == pb.SLICE_CHANGE_APPEND
    assert [m.id for m in r.read.slice] == list(r.message_ids)
    assert [m.user.text or m.assistant.text for m in r.read.slice] == ["next", "reply"]
    assert r.read.info.version == r.version
    # The same bytes a GetContext at that version answers.
    assert r.read == get(sc, "one", since_version=v)
    # Without a read, the reply has none.
    plain = append(sc, "one", user("plain"))
    assert not plain.HasField("read")
    # A retried turn (same idempotency key) is answered with the read too.
    first = append(sc, "one", user("once"), idempotency_key="k1", read=slice_read(plain.version))
    again = append(sc, "one", user("once"), idempotency_key="k1", read=slice_read(plain.version))
    assert again.replayed and again.version == first.version
    assert [m.id for m in again.read.slice] == list(first.message_ids)
    # A reshaped slice (here a compaction) comes whole: REPLACE, first page.
    sc.contexts.Compact(pb.CompactRequest(context_id="one", keep_last=4))
    held = first.version
    r = append(sc, "one", user("after"), read=slice_read(held, page_size=3))
    assert r.read.change == pb.SLICE_CHANGE_REPLACE
    assert r.read.slice[0].id == "summary" and r.read.next_page_token
    rest = get(sc, "one", page_token=r.read.next_page_token)
    assert [m.id for m in rest.slice][-1] == r.message_ids[-1]
    # Other views and formats, as GetContext gives them.
    info = append(sc, "one", user("i"), read=pb.GetContextRequest(view=pb.CONTEXT_VIEW_INFO))
    assert info.read.info.version == info.version and not info.read.slice
    as_openai = append(
        sc,
        "one",
        user("o"),
        read=slice_read(info.version, format=pb.MESSAGE_FORMAT_OPENAI, context_id="one"),
    )
    assert json.loads(as_openai.read.messages_json) == [{"role": "user", "content": "o"}]


@pytest.mark.parametrize(
    ("read", "field"),
    [
        (pb.GetContextRequest(view=9), "read.view"),
        (pb.GetContextRequest(consistency=7), "read.consistency"),
        (slice_read(-1), "read.since_version"),
        (slice_read(page_size=-1), "read.page_size"),
        (slice_read(format=9), "read.format"),
        (pb.GetContextRequest(format=pb.MESSAGE_FORMAT_OPENAI), "read.format"),
        (slice_read(context_id="other"), "read.context_id"),
        (slice_read(page_token="p1.abc"), "read.page_token"),
        (slice_read(since_incarnation="ab12cd34"), "read.since_incarnation"),
        (slice_read(3, since_incarnation="x" * 129), "read.since_incarnation"),
    ],
)
def test_a_turn_with_a_bad_read_is_refused_before_anything_is_appended(
    start_sidecar, store_uri_for, read, field
):
    sc = start_sidecar(store_uri_for("lmdb"))
    before = append(sc, "bad", user("kept"))
    with pytest.raises(grpc.RpcError) as err:
        append(sc, "bad", user("refused"), read=read)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()
    after = get(sc, "bad")
    assert after.info.version == before.version
    assert [m.user.text for m in after.slice] == ["kept"]


@pytest.mark.parametrize("every", [3, 1000], ids=["sealed-first", "folded-before-sealing"])
def test_compactions_are_recorded_and_expand_to_what_they_folded(
    start_sidecar, store_uri_for, backend, every
):
    uri = store_uri_for(backend)
    sc = start_sidecar(uri, contexts__checkpoint_every=every)
    sent = []
    for i in range(12):
        text = f"turn {i} " + "w" * 300
        sent.append(text)
        append(sc, "arc", user(text), assistant("", (f"c{i}", "t")))
        append(sc, "arc", tool(f"c{i}", "t", {"i": i}), assistant(f"done {i}"))
    first = sc.contexts.Compact(pb.CompactRequest(context_id="arc", keep_last=8))
    assert first.compacted and first.compaction.id == f"c{first.version}"
    assert first.compaction.folded == first.folded and first.compaction.expandable
    assert first.compaction.summariser == "extractive"
    assert first.cache.tokens_saved > 0
    assert first.cache.tokens_saved == first.tokens_before - first.tokens_after
    for i in range(3):
        append(sc, "arc", user(f"more {i}"), assistant(f"ok {i}"))
    second = sc.contexts.Compact(pb.CompactRequest(context_id="arc", keep_last=4))
    assert second.compacted

    def expand(s, cid: str, comp: str) -> list[pb.Message]:
        out, token = [], ""
        while True:
            r = s.contexts.ExpandCompaction(
                pb.ExpandCompactionRequest(
                    context_id=cid, compaction_id=comp, page_size=5, page_token=token
                )
            )
            out.extend(r.messages)
            token = r.next_page_token
            if not token:
                return out

    records = get(sc, "arc", pb.CONTEXT_VIEW_FULL).context.compactions
    assert [r.id for r in records] == [first.compaction.id, second.compaction.id]
    folded = expand(sc, "arc", first.compaction.id)
    assert [m.id for m in folded] == [f"m{i}" for i in range(1, first.folded + 1)]
    assert [m.user.text for m in folded if m.WhichOneof("kind") == "user"] == sent[
        : sum(1 for m in folded if m.WhichOneof("kind") == "user")
    ]
    assert json.loads(folded[2].tool.json) == {"i": 0}
    # The archive survives a restart, and the second compaction expands too.
    sc.stop()
    again = start_sidecar(uri)
    assert [m.id for m in expand(again, "arc", first.compaction.id)] == [m.id for m in folded]
    later = expand(again, "arc", second.compaction.id)
    assert later[0].id == f"m{first.folded + 1}" and len(later) == second.folded
    with pytest.raises(grpc.RpcError) as err:
        expand(again, "arc", "c999")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_without_an_archive_expand_says_so(start_sidecar, store_uri_for):
    sc = start_sidecar(store_uri_for("lmdb"), compaction__archive_ttl=0)
    for i in range(6):
        append(sc, "no", user(f"u{i}"), assistant(f"a{i}"))
    r = sc.contexts.Compact(pb.CompactRequest(context_id="no", keep_last=2))
    assert r.compacted and not r.compaction.expandable
    with pytest.raises(grpc.RpcError) as err:
        sc.contexts.ExpandCompaction(
            pb.ExpandCompactionRequest(context_id="no", compaction_id=r.compaction.id)
        )
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "archive_ttl" in err.value.details()


def test_plan_compaction_previews_the_cache_effect(start_sidecar, store_uri_for):
    sc = start_sidecar(store_uri_for("lmdb"))
    for i in range(8):
        append(sc, "cache", user(f"u{i} " + "q" * 400), assistant(f"a{i}"))
    p = sc.contexts.PlanCompaction(pb.PlanCompactionRequest(context_id="cache", keep_last=4))
    assert p.cache.tokens_saved > 0
    # The summary block opens the new slice, so nothing of the old one stays a prefix.
    assert p.cache.prefix_tokens_kept == 0
    assert p.cache.tokens_rewritten + p.cache.tokens_saved == p.tokens_before
