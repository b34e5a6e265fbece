"""Provider shapes over real gRPC against a real sidecar (LMDB and S3): turns
appended as OpenAI or Anthropic JSON, slices read back in either shape —
exact round trips, valid cross-shape requests, compacted contexts (also a
long agentic run whose kept window opens with an assistant tool call),
paging and incremental reads of the JSON, and refusals naming the element."""

from __future__ import annotations

import json

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.compaction.cut import USER_PREAMBLE_HEAD
from tests.providers.test_providers import ANTHROPIC_RUN, OPENAI_RUN, check_anthropic, check_openai

OA, AN, CT = pb.MESSAGE_FORMAT_OPENAI, pb.MESSAGE_FORMAT_ANTHROPIC, pb.MESSAGE_FORMAT_CTXD


@pytest.fixture(params=["lmdb", "s3"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def sc(start_sidecar, store_uri_for, backend):
    return start_sidecar(store_uri_for(backend), contexts__auto_compact=False)


def append_json(sc, cid: str, items, fmt, system=None, **kw) -> pb.AppendTurnResponse:
    text = items if isinstance(items, str) else json.dumps(items)
    req = pb.AppendTurnRequest(context_id=cid, messages_json=text, format=fmt, **kw)
    if system is not None:
        req.system_json = json.dumps(system)
    return sc.contexts.AppendTurn(req)


def read(sc, cid: str, fmt, **kw) -> pb.GetContextResponse:
    req = pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_SLICE, format=fmt, **kw)
    return sc.contexts.GetContext(req)


def openai_of(sc, cid: str, **kw) -> list[dict]:
    resp = read(sc, cid, OA, **kw)
    assert not resp.slice and not resp.system_json
    out = json.loads(resp.messages_json)
    check_openai(out)
    return out


def anthropic_of(sc, cid: str, **kw) -> tuple[list[dict], list[dict]]:
    resp = read(sc, cid, AN, **kw)
    system = json.loads(resp.system_json) if resp.system_json else []
    messages = json.loads(resp.messages_json)
    check_anthropic(system, messages)
    return system, messages


def refused(call) -> str:
    with pytest.raises(grpc.RpcError) as err:
        call()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return err.value.details()


# -- round trips ----------------------------------------------------------------------------
def test_openai_in_openai_out_is_exact(sc):
    # the run arrives over two turns, the way a runtime sends it
    append_json(sc, "oa", OPENAI_RUN[:3], OA)
    r = append_json(sc, "oa", OPENAI_RUN[3:], OA)
    assert r.message_ids == ["m4", "m5", "m6"]
    assert openai_of(sc, "oa") == OPENAI_RUN
    raw = read(sc, "oa", OA).messages_json
    assert json.dumps('{"n":123456789012345678901234567890}') in raw
    assert json.dumps('{"city": "Paris", "t": 1.10}') in raw


def test_anthropic_in_anthropic_out_is_exact(sc):
    text = json.dumps(ANTHROPIC_RUN).replace('"n": 1.1}', '"n": 1.10}')
    append_json(sc, "an", text, AN, system=[{"type": "text", "text": "sys"}])
    system, messages = anthropic_of(sc, "an")
    assert system == [{"type": "text", "text": "sys"}]
    assert messages == ANTHROPIC_RUN
    assert '"n":1.10' in read(sc, "an", AN).messages_json


def test_cross_shapes_are_valid_both_ways(sc):
    append_json(sc, "x1", OPENAI_RUN, OA)
    system, messages = anthropic_of(sc, "x1", cache_breakpoint=True)
    assert system == [
        {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
    ]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    append_json(sc, "x2", ANTHROPIC_RUN, AN, system="sys")
    out = openai_of(sc, "x2")
    assert out[0] == {"role": "system", "content": "sys"}


def test_ctxd_json_and_protobuf_messages_meet(sc):
    items = [{"user": {"text": "hi"}}, {"assistant": {"text": "hello"}}]
    append_json(sc, "ct", items, CT)
    resp = read(sc, "ct", CT)
    got = json.loads(resp.messages_json)
    assert [{k: v for k, v in m.items() if k in ("user", "assistant")} for m in got] == items
    assert [m["id"] for m in got] == ["m1", "m2"]
    plain = sc.contexts.GetContext(
        pb.GetContextRequest(context_id="ct", view=pb.CONTEXT_VIEW_SLICE)
    )
    assert [m.user.text or m.assistant.text for m in plain.slice] == ["hi", "hello"]
    assert not plain.messages_json


# -- compacted contexts ---------------------------------------------------------------------
def _agentic_run(sc, cid: str, rounds: int) -> None:
    append_json(sc, cid, [{"role": "user", "content": "fix every failing test"}], OA)
    for i in range(rounds):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "run", "arguments": json.dumps({"step": i})},
        }
        append_json(
            sc,
            cid,
            [
                {"role": "assistant", "content": f"step {i}", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": f"ok {i}" + " x" * 40},
            ],
            OA,
        )


def test_a_compacted_agentic_run_still_gives_valid_requests(sc):
    _agentic_run(sc, "run", 10)
    r = sc.contexts.Compact(pb.CompactRequest(context_id="run", keep_last=3))
    assert r.compacted, r.reason
    oa = openai_of(sc, "run")
    assert oa[0]["role"] == "system" and oa[0]["content"]  # the summary block
    assert oa[1]["role"] == "assistant" and oa[1]["tool_calls"]
    system, messages = anthropic_of(sc, "run", cache_breakpoint=True)
    # the kept window opens with an assistant tool call: the summary is a user preamble
    assert system == []
    pre = messages[0]["content"][0]
    assert pre["text"].startswith(USER_PREAMBLE_HEAD)
    assert pre["cache_control"] == {"type": "ephemeral"}
    assert messages[1]["role"] == "assistant" and messages[1]["content"][-1]["type"] == "tool_use"
    # more turns after the compaction still give valid requests
    append_json(sc, "run", [{"role": "user", "content": "and now?"}], OA)
    openai_of(sc, "run")
    anthropic_of(sc, "run")


def test_a_compacted_conversation_keeps_the_summary_in_system(sc):
    for i in range(6):
        append_json(
            sc,
            "conv",
            [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}],
            AN,
        )
    r = sc.contexts.Compact(pb.CompactRequest(context_id="conv", keep_last=2))
    assert r.compacted, r.reason
    system, messages = anthropic_of(sc, "conv", cache_breakpoint=True)
    assert len(system) == 1 and system[0]["cache_control"] == {"type": "ephemeral"}
    assert messages[0] == {"role": "user", "content": [{"type": "text", "text": "q5"}]}
    oa = openai_of(sc, "conv")
    assert oa[0]["role"] == "system" and oa[1:] == [
        {"role": "user", "content": "q5"},
        {"role": "assistant", "content": "a5"},
    ]


# -- paging and incremental reads ------------------------------------------------------------
def test_json_pages_and_increments_hold_the_page(sc):
    _agentic_run(sc, "pg", 4)  # 9 messages
    first = read(sc, "pg", OA, page_size=4)
    got = json.loads(first.messages_json)
    while first.next_page_token:
        first = read(sc, "pg", OA, page_size=4, page_token=first.next_page_token)
        got += json.loads(first.messages_json)
    assert got == openai_of(sc, "pg")
    version = first.info.version
    append_json(sc, "pg", [{"role": "user", "content": "next"}], OA)
    inc = read(sc, "pg", OA, since_version=version)
    assert inc.change == pb.SLICE_CHANGE_APPEND
    assert json.loads(inc.messages_json) == [{"role": "user", "content": "next"}]
    inc = read(sc, "pg", AN, since_version=version + 1)
    assert inc.change == pb.SLICE_CHANGE_NONE and json.loads(inc.messages_json or "[]") == []


# -- refusals --------------------------------------------------------------------------------
def test_refusals_name_the_field(sc):
    msg = pb.Message(user=pb.UserMessage(text="hi"))
    both = pb.AppendTurnRequest(context_id="e", messages=[msg], messages_json="[]", format=OA)
    assert "messages_json" in refused(lambda: sc.contexts.AppendTurn(both))
    no_fmt = pb.AppendTurnRequest(context_id="e", messages_json="[]")
    assert "format" in refused(lambda: sc.contexts.AppendTurn(no_fmt))
    stray = pb.AppendTurnRequest(context_id="e", messages=[msg], format=OA)
    assert "format" in refused(lambda: sc.contexts.AppendTurn(stray))
    bad_args = [
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "user", "content": "c"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{"}}
            ],
        },
    ]
    details = refused(lambda: append_json(sc, "e", bad_args, OA))
    assert "messages_json[3].tool_calls[0].function.arguments" in details
    # a domain refusal names the element the caller sent
    orphan = [
        {"role": "user", "content": [{"type": "text", "text": "x"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]},
    ]
    assert "messages_json[1].content[0]" in refused(lambda: append_json(sc, "e", orphan, AN))
    assert "messages_json" in refused(lambda: append_json(sc, "e", [], OA))
    full = pb.GetContextRequest(context_id="root", view=pb.CONTEXT_VIEW_FULL, format=OA)
    assert "format" in refused(lambda: sc.contexts.GetContext(full))
    # nothing was stored: the conversation was never created
    info = pb.GetContextRequest(context_id="e", view=pb.CONTEXT_VIEW_INFO)
    with pytest.raises(grpc.RpcError) as err:
        sc.contexts.GetContext(info)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
