"""ContextService over gRPC: append/get/list/delete, versions, idempotency,
tokens, calibration and the slice, on every backend."""

from __future__ import annotations

import concurrent.futures
import math

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.contexts import ops

ROOT = "root"


# -- helpers (also used by the other context test modules) -------------------------------
def user(text: str, principal: str = "") -> pb.Message:
    return pb.Message(user=pb.UserMessage(text=text, principal=principal))


def assistant(text: str = "", *calls: tuple[str, str, str]) -> pb.Message:
    return pb.Message(
        assistant=pb.AssistantMessage(
            text=text,
            tool_calls=[pb.ToolCall(id=i, name=n, arguments_json=a) for i, n, a in calls],
        )
    )


def tool_json(call_id: str, name: str, content: str, is_error: bool = False) -> pb.Message:
    return pb.Message(
        tool=pb.ToolResult(call_id=call_id, name=name, json=content, is_error=is_error)
    )


def tool_text(call_id: str, name: str, content: str) -> pb.Message:
    return pb.Message(tool=pb.ToolResult(call_id=call_id, name=name, text=content))


def system(text: str) -> pb.Message:
    return pb.Message(system=pb.SystemMessage(text=text))


def note(text: str) -> pb.Message:
    return pb.Message(note=pb.NoteMessage(text=text))


def append(stub, cid: str, *messages: pb.Message, **kw) -> pb.AppendTurnResponse:
    return stub.AppendTurn(pb.AppendTurnRequest(context_id=cid, messages=list(messages), **kw))


def full(stub, cid: str) -> pb.Context:
    """The whole record, every page of its messages (as a client reads it)."""
    resp = stub.GetContext(pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_FULL))
    ctx = resp.context
    while resp.next_page_token:
        resp = stub.GetContext(
            pb.GetContextRequest(
                context_id=cid, view=pb.CONTEXT_VIEW_FULL, page_token=resp.next_page_token
            )
        )
        ctx.messages.extend(resp.context.messages)
    return ctx


def info(stub, cid: str) -> pb.ContextInfo:
    return stub.GetContext(pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_INFO)).info


def list_all(stub, **kw) -> list[pb.ContextInfo]:
    out, token = [], ""
    while True:
        resp = stub.ListContexts(pb.ListContextsRequest(page_token=token, **kw))
        out.extend(resp.contexts)
        token = resp.next_page_token
        if not token:
            return out


def rpc_error(fn, *args, **kw) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info_:
        fn(*args, **kw)
    return info_.value


def bad_field(err: grpc.RpcError) -> str:
    """The field named in the error's google.rpc.BadRequest."""
    status = rpc_status.from_call(err)
    assert status is not None, "no rich status"
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            br = error_details_pb2.BadRequest()
            detail.Unpack(br)
            return br.field_violations[0].field
    raise AssertionError("no BadRequest detail")


def estimate(text: str) -> int:
    return math.ceil(len(text) / 4)


def texts(ctx: pb.Context) -> list[str]:
    out = []
    for m in ctx.messages:
        kind = m.WhichOneof("kind")
        body = getattr(m, kind)
        out.append(body.json or body.text if kind == "tool" else body.text)
    return out


# -- append / get ------------------------------------------------------------------------------
def test_append_and_get_round_trips_every_message_kind(sidecar):
    c = sidecar.contexts
    turn = [
        system("be brief"),
        user("what is 2+2?", principal="alice"),
        assistant("let me check", ("call-1", "calc", '{"expr": "2+2"}'), ("call-2", "say", "")),
        tool_json("call-1", "calc", '{"value": 4}'),
        tool_text("call-2", "say", "four"),
        note("user is typing"),
        pb.Message(ts_ms=1234, assistant=pb.AssistantMessage(text="4")),
    ]
    resp = append(c, "conv-1", *turn, principal="alice", task="task-9")
    assert resp.version == 1
    assert list(resp.message_ids) == [f"m{i}" for i in range(1, 8)]
    assert not resp.replayed

    ctx = full(c, "conv-1")
    assert ctx.id == "conv-1" and ctx.kind == pb.CONTEXT_KIND_CONVERSATION
    assert ctx.version == 1 and ctx.turns == 1
    assert ctx.principal == "alice" and ctx.task == "task-9"
    assert [m.id for m in ctx.messages] == list(resp.message_ids)
    got = [m.WhichOneof("kind") for m in ctx.messages]
    assert got == ["system", "user", "assistant", "tool", "tool", "note", "assistant"]
    assert ctx.messages[1].user.principal == "alice"
    call = ctx.messages[2].assistant.tool_calls[0]
    assert (call.id, call.name, call.arguments_json) == ("call-1", "calc", '{"expr": "2+2"}')
    assert ctx.messages[3].tool.WhichOneof("content") == "json"
    assert ctx.messages[3].tool.json == '{"value": 4}'
    assert ctx.messages[4].tool.WhichOneof("content") == "text"
    assert ctx.messages[6].ts_ms == 1234  # given timestamps are kept
    assert all(m.ts_ms > 0 for m in ctx.messages)  # missing ones filled
    assert ctx.created_ms > 0 and ctx.updated_ms >= ctx.created_ms

    expected = (
        estimate("be brief")
        + estimate("what is 2+2?")
        + estimate("let me check")
        + estimate("calc")
        + estimate('{"expr": "2+2"}')
        + estimate("say")
        + estimate('{"value": 4}')
        + estimate("four")
        + estimate("user is typing")
        + estimate("4")
        + 7 * 4
    )
    assert resp.est_tokens == expected == ctx.est_tokens
    i = info(c, "conv-1")
    assert (i.version, i.turns, i.message_count, i.est_tokens) == (1, 1, 7, expected)


def test_versions_bump_once_per_turn_and_expected_version_is_checked(sidecar):
    c = sidecar.contexts
    assert append(c, "v", user("a"), assistant("b"), expected_version=0).version == 1
    assert append(c, "v", user("c")).version == 2
    assert append(c, "v", user("d"), expected_version=2).version == 3

    err = rpc_error(append, c, "v", user("stale"), expected_version=2)
    assert err.code() == grpc.StatusCode.ABORTED
    assert "version 3" in err.details()
    err = rpc_error(append, c, "other", user("x"), expected_version=4)
    assert err.code() == grpc.StatusCode.ABORTED  # a new context is at version 0
    ctx = full(c, "v")
    assert ctx.version == 3 and texts(ctx) == ["a", "b", "c", "d"]
    assert rpc_error(info, c, "other").code() == grpc.StatusCode.NOT_FOUND


def test_idempotency_key_returns_first_result_and_appends_nothing(sidecar):
    c = sidecar.contexts
    first = append(c, "idem", user("hello"), idempotency_key="k1")
    again = append(c, "idem", user("hello"), idempotency_key="k1")
    assert again.replayed and not first.replayed
    assert (again.version, list(again.message_ids), again.est_tokens) == (
        first.version,
        list(first.message_ids),
        first.est_tokens,
    )
    append(c, "idem", user("next"), idempotency_key="k2")
    # A retry of an older key, even with a stale expected_version, is still answered.
    old = append(c, "idem", user("hello"), idempotency_key="k1", expected_version=0)
    assert old.replayed and old.version == 1
    ctx = full(c, "idem")
    assert ctx.version == 2 and texts(ctx) == ["hello", "next"]


def test_root_always_exists_and_cannot_be_deleted(sidecar):
    c = sidecar.contexts
    r = info(c, ROOT)
    assert r.kind == pb.CONTEXT_KIND_ROOT and r.version == 0
    assert [i.id for i in list_all(c)] == [ROOT]
    err = rpc_error(c.DeleteContext, pb.DeleteContextRequest(context_id=ROOT))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    resp = append(c, ROOT, user("I am the root agent"))
    assert resp.version == 1
    assert full(c, ROOT).kind == pb.CONTEXT_KIND_ROOT


def test_unknown_contexts(sidecar):
    c = sidecar.contexts
    assert rpc_error(info, c, "nope").code() == grpc.StatusCode.NOT_FOUND
    err = rpc_error(c.RecordUsage, pb.RecordUsageRequest(context_id="nope", input_tokens=10))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert not c.DeleteContext(pb.DeleteContextRequest(context_id="nope")).deleted


def test_list_pages_in_id_order_with_kind_filter(sidecar):
    c = sidecar.contexts
    ids = [f"conv-{i:02d}" for i in range(7)]
    for n, cid in enumerate(reversed(ids)):
        for _ in range(n % 3 + 1):
            append(c, cid, user("x" * 40))
    seen, token, pages = [], "", 0
    while True:
        resp = c.ListContexts(pb.ListContextsRequest(page_size=3, page_token=token))
        assert len(resp.contexts) <= 3
        seen.extend(resp.contexts)
        pages += 1
        token = resp.next_page_token
        if not token:
            break
    assert pages >= 3
    assert [i.id for i in seen] == sorted([*ids, ROOT])
    by_id = {i.id: i for i in seen}
    for n, cid in enumerate(reversed(ids)):
        turns = n % 3 + 1
        i = by_id[cid]
        assert (i.version, i.turns, i.message_count) == (turns, turns, turns)
        assert i.est_tokens == turns * (10 + 4)
        assert i.kind == pb.CONTEXT_KIND_CONVERSATION and i.updated_ms > 0
    convs = list_all(c, kind=pb.CONTEXT_KIND_CONVERSATION, page_size=2)
    assert [i.id for i in convs] == ids
    roots = c.ListContexts(pb.ListContextsRequest(kind=pb.CONTEXT_KIND_ROOT)).contexts
    assert [i.id for i in roots] == [ROOT]


def test_delete_removes_everything_and_the_id_can_start_over(sidecar):
    c = sidecar.contexts
    for i in range(5):
        append(c, "gone", user(f"turn {i}"), idempotency_key=f"k{i}")
    err = rpc_error(c.DeleteContext, pb.DeleteContextRequest(context_id="gone", expected_version=3))
    assert err.code() == grpc.StatusCode.ABORTED
    assert c.DeleteContext(pb.DeleteContextRequest(context_id="gone", expected_version=5)).deleted
    assert rpc_error(info, c, "gone").code() == grpc.StatusCode.NOT_FOUND
    assert "gone" not in [i.id for i in list_all(c)]
    assert not c.DeleteContext(pb.DeleteContextRequest(context_id="gone")).deleted
    # Same id again: a new conversation, no leftovers, old idempotency keys forgotten.
    resp = append(c, "gone", user("fresh"), idempotency_key="k1")
    assert resp.version == 1 and not resp.replayed
    assert texts(full(c, "gone")) == ["fresh"]


def test_tool_results_may_answer_calls_from_earlier_turns(sidecar):
    c = sidecar.contexts
    append(c, "tools", user("go"), assistant("", ("a", "search", '{"q": 1}'), ("b", "fetch", "")))
    append(c, "tools", tool_json("a", "search", "[1, 2]"), tool_text("b", "fetch", "page"))
    append(c, "tools", assistant("", ("c", "x", "{}")), tool_json("c", "x", "null", is_error=True))
    ctx = full(c, "tools")
    assert ctx.version == 3 and len(ctx.messages) == 6
    assert ctx.messages[-1].tool.is_error


def test_concurrent_turns_on_one_context_are_serialised(sidecar):
    c = sidecar.contexts
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: append(c, "busy", user(f"t{i}")), range(24)))
        others = list(pool.map(lambda i: append(c, f"side-{i % 4}", user("s")), range(8)))
    assert sorted(r.version for r in results) == list(range(1, 25))
    ctx = full(c, "busy")
    by_version = {r.version: r for r in results}
    # Each turn's message sits at the position its version says.
    for v in range(1, 25):
        (mid,) = by_version[v].message_ids
        assert ctx.messages[v - 1].id == mid
    assert sorted(r.version for r in others) == [1, 1, 1, 1, 2, 2, 2, 2]


# -- tokens, windows, calibration --------------------------------------------------------------
def test_model_sets_window_and_compaction_due(sidecar):
    c = sidecar.contexts
    append(c, "w", user("hi"), model="claude-sonnet-4")
    assert info(c, "w").model_window == 200_000
    append(c, "w", user("hi"), model="gpt-4.1-mini")
    assert info(c, "w").model_window == 1_000_000
    append(c, "w", user("hi"), model="o3-mini")
    assert info(c, "w").model_window == 128_000
    append(c, "w", user("hi"), model="gemini-2.5-pro", model_window=50_000)
    assert info(c, "w").model_window == 50_000
    assert full(c, "w").model == "gemini-2.5-pro"

    small = append(c, "due", user("x" * 200), model_window=100)  # 50 + 4 tokens of 100
    assert not small.compaction_due
    big = append(c, "due", user("x" * 80))  # 54 + 24 = 78 > 70
    assert big.compaction_due and big.est_tokens == 78


def test_record_usage_calibrates_the_estimate(sidecar):
    c = sidecar.contexts
    raw = append(c, "cal", user("y" * 1000)).est_tokens  # 254
    resp = c.RecordUsage(pb.RecordUsageRequest(context_id="cal", input_tokens=2 * raw, model="m1"))
    assert resp.calibration == pytest.approx(2.0)
    assert resp.est_tokens == 2 * raw
    nxt = append(c, "cal", user("z" * 400))  # raw + 104
    assert nxt.est_tokens == math.ceil((raw + 104) * 2.0)
    assert info(c, "cal").est_tokens == nxt.est_tokens
    # Later samples are smoothed, outliers clamped.
    resp = c.RecordUsage(
        pb.RecordUsageRequest(context_id="cal", input_tokens=100 * raw, model="m1")
    )
    assert 2.0 < resp.calibration < 3.0
    # Another model starts over.
    resp = c.RecordUsage(
        pb.RecordUsageRequest(context_id="cal", input_tokens=raw + 104, model="m2")
    )
    assert resp.calibration == pytest.approx(1.0)
    assert resp.est_tokens == raw + 104
    # Too small a context to learn from: ignored.
    append(c, "tiny", user("hi"))
    resp = c.RecordUsage(pb.RecordUsageRequest(context_id="tiny", input_tokens=5000))
    assert resp.calibration == 1.0 and resp.est_tokens == 5


# -- the slice ------------------------------------------------------------------------------------
def _set_summary(state, rec):
    state.summary.facts = list(rec["facts"])
    state.refresh_blocks()


ops.register(ops.Op("test.set_summary", _set_summary))


def test_slice_puts_summary_then_transcript(start_sidecar, store_uri_for):
    r = start_sidecar(store_uri_for("lmdb"))
    c = r.contexts
    append(c, "s", user("hello"), assistant("hi"))
    sl = c.GetContext(pb.GetContextRequest(context_id="s", view=pb.CONTEXT_VIEW_SLICE))
    assert [m.id for m in sl.slice] == ["m1", "m2"]
    assert not sl.HasField("context")

    service = r.extra["sidecar"].domain.contexts
    before = info(c, "s").est_tokens
    r.extra["handle"].call(
        service.change("s", lambda st: {"op": "test.set_summary", "facts": ["the sky is blue"]})
    )
    sl = c.GetContext(pb.GetContextRequest(context_id="s", view=pb.CONTEXT_VIEW_SLICE))
    assert [m.id for m in sl.slice] == ["summary", "m1", "m2"]
    block = sl.slice[0].system.text
    assert block.startswith("Summary of earlier conversation:") and "the sky is blue" in block
    assert sl.info.version == 2
    assert sl.info.est_tokens == before + estimate(block) + 4
    ctx = full(c, "s")
    assert list(ctx.summary.facts) == ["the sky is blue"]
