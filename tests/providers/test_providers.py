"""Provider shapes in the domain: produced JSON checked against the providers'
own SDK types (openai's ChatCompletionMessageParam, anthropic's MessageParam)
and Anthropic's structural rules; conversions in, refusals naming the
element, and random transcripts (hypothesis) whose both outputs validate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic.types import MessageParam, TextBlockParam
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter, ValidationError

from ctxd_sidecar.core.compaction.cut import USER_PREAMBLE_HEAD
from ctxd_sidecar.core.contexts.model import ASSISTANT, NOTE, SYSTEM, TOOL, USER, Msg, ToolCall
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.core.providers import ANTHROPIC, OPENAI, parse_turn, relabel
from ctxd_sidecar.core.providers.anthropic import to_anthropic
from ctxd_sidecar.core.providers.common import PENDING_RESULT, dumps
from ctxd_sidecar.core.providers.openai import to_openai

OPENAI_MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
ANTHROPIC_MESSAGES = TypeAdapter(list[MessageParam])
ANTHROPIC_SYSTEM = TypeAdapter(list[TextBlockParam])


# -- validators ----------------------------------------------------------------------------
def _materialise(v: Any) -> Any:
    """Consume pydantic's lazy Iterable validators (which validate items only
    when iterated) so every nested block is checked."""
    if isinstance(v, dict):
        return {k: _materialise(x) for k, x in v.items()}
    if isinstance(v, list | tuple | Iterator) or type(v).__name__ == "ValidatorIterator":
        return [_materialise(x) for x in v]
    return v


def sdk_valid(adapter: TypeAdapter, value: Any) -> None:
    """Valid as the SDK type, with no key the type does not know (pydantic
    drops unknown TypedDict keys, so the validated copy must equal the input)."""
    try:
        validated = _materialise(adapter.validate_python(value))
    except ValidationError as exc:
        raise AssertionError(f"not valid as the SDK type: {exc}") from None
    assert validated == value, "keys the SDK type does not know"


def check_openai(messages: list[dict]) -> None:
    sdk_valid(OPENAI_MESSAGES, messages)
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] != "tool", f"tool message {i} follows no assistant tool call"
        calls = [c["id"] for c in m.get("tool_calls") or ()]
        i += 1
        answered = []
        while i < len(messages) and messages[i]["role"] == "tool":
            answered.append(messages[i]["tool_call_id"])
            i += 1
        if calls and i < len(messages):  # an open call may end the request
            assert sorted(answered) == sorted(calls), f"calls {calls} answered by {answered}"
        elif calls:
            assert set(answered) <= set(calls)


def check_anthropic(system: list[dict], messages: list[dict]) -> None:
    sdk_valid(ANTHROPIC_SYSTEM, system)
    sdk_valid(ANTHROPIC_MESSAGES, messages)
    if not messages:
        return
    assert messages[0]["role"] == "user", "the first message must be a user message"
    for a, b in zip(messages, messages[1:], strict=False):
        assert a["role"] != b["role"], "roles must alternate"
    for i, m in enumerate(messages):
        blocks = m["content"]
        assert blocks, f"message {i} is empty"
        for b in blocks:
            if b["type"] == "text":
                assert b["text"].strip(), f"message {i} has a blank text block"
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        if results:
            prev = messages[i - 1] if i else {"content": []}
            uses = [b["id"] for b in prev["content"] if b["type"] == "tool_use"]
            assert len(set(results)) == len(results), f"results {results} repeat a call"
            assert set(results) <= set(uses), f"results {results} answer uses {uses}"
            lead = [b["type"] for b in blocks[: len(results)]]
            assert lead == ["tool_result"] * len(results), "tool_result blocks come first"
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        if uses and i + 1 < len(messages):
            nxt = messages[i + 1]["content"]
            # the round still in flight at the very end may be partly answered
            in_flight = i + 2 == len(messages) and all(b["type"] == "tool_result" for b in nxt)
            if not in_flight:
                answered = {b.get("tool_use_id") for b in nxt}
                assert set(uses) <= answered, f"tool_use {uses} not answered in the next message"


def anthropic_of(msgs, **kw) -> tuple[list[dict], list[dict]]:
    system, messages = to_anthropic(msgs, **kw)
    return json.loads(dumps(system)), json.loads(dumps(messages))


# -- the checks fail when they should ----------------------------------------------------------
def test_the_validators_refuse_what_the_providers_refuse():
    with pytest.raises(AssertionError):  # unknown nested key
        check_openai(
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}", "x": 1},
                        }
                    ],
                }
            ]
        )
    with pytest.raises(AssertionError):  # tool message without a preceding call
        check_openai([{"role": "user", "content": "a"}, {"role": "tool", "tool_call_id": "c"}])
    with pytest.raises(AssertionError):  # bad block type
        check_anthropic([], [{"role": "user", "content": [{"type": "txt", "text": "a"}]}])
    use = {"type": "tool_use", "id": "c", "name": "f", "input": {}}
    res = {"type": "tool_result", "tool_use_id": "c", "content": "ok"}
    hi = {"type": "text", "text": "hi"}
    for bad in (
        [{"role": "assistant", "content": [hi]}],  # first not user
        [{"role": "user", "content": [hi]}, {"role": "user", "content": [hi]}],  # not alternating
        [
            {"role": "user", "content": [hi]},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [hi]},
            {"role": "assistant", "content": [hi]},
            {"role": "user", "content": [res]},
        ],  # result not right after its use
        [
            {"role": "user", "content": [hi]},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [hi, res]},
        ],  # result not first
    ):
        with pytest.raises(AssertionError):
            check_anthropic([], bad)


# -- OpenAI --------------------------------------------------------------------------------
OPENAI_RUN = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "weather in Paris and Rome?", "name": "ana"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Paris", "t": 1.10}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {
                    "name": "weather",
                    "arguments": '{"n":123456789012345678901234567890}',
                },
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"c": 21}'},
    {"role": "tool", "tool_call_id": "call_2", "content": "rainy"},
    {"role": "assistant", "content": "Paris 21C, Rome rainy."},
]


def test_openai_in_openai_out_is_exact():
    turn = parse_turn(OPENAI, json.dumps(OPENAI_RUN))
    assert [m.kind for m in turn.messages] == [SYSTEM, USER, ASSISTANT, TOOL, TOOL, ASSISTANT]
    assert turn.messages[3].name == "weather"
    out = json.loads(dumps(to_openai(turn.messages)))
    assert out == OPENAI_RUN
    check_openai(out)
    args = [c["function"]["arguments"] for c in out[2]["tool_calls"]]
    assert args == ['{"city": "Paris", "t": 1.10}', '{"n":123456789012345678901234567890}']


def test_openai_in_anthropic_out_is_valid():
    turn = parse_turn(OPENAI, json.dumps(OPENAI_RUN))
    system, messages = anthropic_of(turn.messages, summary="S", cache_breakpoint=True)
    check_anthropic(system, messages)
    assert system[0]["text"] == "S" and system[-1]["cache_control"] == {"type": "ephemeral"}
    uses = messages[1]["content"]
    assert uses[0]["input"] == {"city": "Paris", "t": 1.1}
    raw = dumps(to_anthropic(turn.messages)[1])
    assert '"t":1.10' in raw and "123456789012345678901234567890}" in raw


def test_openai_content_parts_and_developer_are_normalised():
    items = [
        {"role": "developer", "content": [{"type": "text", "text": "a"}]},
        {"role": "user", "content": [{"type": "text", "text": "b"}, {"type": "text", "text": "c"}]},
        {"role": "assistant", "content": "x", "refusal": None, "audio": None},
    ]
    turn = parse_turn(OPENAI, json.dumps(items))
    assert [(m.kind, m.text) for m in turn.messages] == [
        (SYSTEM, "a"),
        (USER, "b\nc"),
        (ASSISTANT, "x"),
    ]


@pytest.mark.parametrize(
    "items,field",
    [
        (
            [
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
                {"role": "user", "content": "c"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{"}}
                    ],
                },
            ],
            "messages_json[3].tool_calls[0].function.arguments",
        ),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
            "messages_json[0].content[0].type",
        ),
        ([{"role": "function", "content": "x", "name": "f"}], "messages_json[0].role"),
        ([{"role": "tool", "content": "x"}], "messages_json[0].tool_call_id"),
        ([{"role": "user", "content": 5}], "messages_json[0].content"),
        (
            [{"role": "assistant", "tool_calls": [{"id": "", "function": {"name": "f"}}]}],
            "messages_json[0].tool_calls[0].id",
        ),
        ([{"role": "assistant", "refusal": "no"}], "messages_json[0].refusal"),
        ({"role": "user"}, "messages_json"),
    ],
)
def test_openai_refusals_name_the_element(items, field):
    with pytest.raises(InvalidArgument) as err:
        parse_turn(OPENAI, json.dumps(items))
    assert err.value.field == field


def test_the_json_rule_applies_first():
    with pytest.raises(InvalidArgument) as err:
        parse_turn(OPENAI, '[{"role": "user", "content": NaN}]')
    assert err.value.field == "messages_json"
    with pytest.raises(InvalidArgument) as err:
        parse_turn(OPENAI, "[" * 80 + "]" * 80)
    assert err.value.field == "messages_json" and "deeper" in err.value.description


def test_a_domain_refusal_is_renamed_to_the_element():
    turn = parse_turn(ANTHROPIC, json.dumps(ANTHROPIC_RUN), json.dumps("sys"))
    exc = InvalidArgument("messages[3].tool.call_id", "answers no tool call")
    assert relabel(exc, turn.origins).field == "messages_json[2].content[0]"


# -- Anthropic -----------------------------------------------------------------------------
ANTHROPIC_RUN = [
    {"role": "user", "content": [{"type": "text", "text": "list /tmp"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Looking."},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"p": "/tmp", "n": 1.10}},
            {"type": "tool_use", "id": "toolu_2", "name": "du", "input": {}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a b"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "content": "denied",
                "is_error": True,
            },
            {"type": "text", "text": "and be quick"},
        ],
    },
    {
        "role": "assistant",
        "content": [{"type": "text", "text": "One"}, {"type": "text", "text": "Two"}],
    },
]


def test_anthropic_in_anthropic_out_is_exact():
    text = json.dumps(ANTHROPIC_RUN).replace('"n": 1.1}', '"n": 1.10}')
    assert '"n": 1.10}' in text
    turn = parse_turn(ANTHROPIC, text, '[{"type": "text", "text": "sys"}]')
    kinds = [m.kind for m in turn.messages]
    assert kinds == [SYSTEM, USER, ASSISTANT, TOOL, TOOL, USER, ASSISTANT, ASSISTANT]
    assert turn.messages[4].is_error and turn.messages[4].name == "du"
    system, messages = anthropic_of(turn.messages)
    assert system == [{"type": "text", "text": "sys"}]
    assert messages == ANTHROPIC_RUN
    check_anthropic(system, messages)
    assert '"n":1.10' in dumps(to_anthropic(turn.messages)[1])


def test_anthropic_in_openai_out_is_valid():
    turn = parse_turn(ANTHROPIC, json.dumps(ANTHROPIC_RUN), json.dumps("sys"))
    out = json.loads(dumps(to_openai(turn.messages)))
    check_openai(out)
    assert out[0] == {"role": "system", "content": "sys"}
    assert json.loads(out[2]["tool_calls"][0]["function"]["arguments"]) == {"p": "/tmp", "n": 1.1}


def test_anthropic_normalisation():
    items = [
        {"role": "user", "content": "hi", "cache_control": None},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t", "name": "f", "input": {}},
                {"type": "text", "text": "after"},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                    "is_error": False,
                }
            ],
        },
    ]
    _, messages = anthropic_of(parse_turn(ANTHROPIC, json.dumps(items)).messages)
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "after"},
                {"type": "tool_use", "id": "t", "name": "f", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": "a\nb"}],
        },
    ]


@pytest.mark.parametrize(
    "items,system,field",
    [
        (
            [{"role": "user", "content": [{"type": "image", "source": {}}]}],
            None,
            "messages_json[0].content[0].type",
        ),
        (
            [{"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]}],
            None,
            "messages_json[0].content[0].type",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]},
            ],
            None,
            "messages_json[1].content[0].input",
        ),
        ([{"role": "system", "content": "x"}], None, "messages_json[0].role"),
        ([], [{"type": "image"}], "system_json[0].type"),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": 1}],
                }
            ],
            None,
            "messages_json[0].content[0].is_error",
        ),
    ],
)
def test_anthropic_refusals_name_the_element(items, system, field):
    with pytest.raises(InvalidArgument) as err:
        parse_turn(ANTHROPIC, json.dumps(items), json.dumps(system) if system else "")
    assert err.value.field == field


def test_system_json_is_anthropic_only():
    with pytest.raises(InvalidArgument) as err:
        parse_turn(OPENAI, "[]", '"x"')
    assert err.value.field == "system_json"


# -- placement, pairing, notes ---------------------------------------------------------------
def _msgs():
    return [
        Msg(ASSISTANT, tool_calls=(ToolCall("c1", "job", "{}"),)),
        Msg(USER, text="still there?"),
        Msg(NOTE, text="user idle"),
        Msg(ASSISTANT, text="waiting on the job"),
        Msg(TOOL, call_id="c1", name="job", content='{"ok":true}', content_json=True),
        Msg(ASSISTANT, text="done", tool_calls=(ToolCall("c2", "next", ""),)),
    ]


def test_a_window_opening_with_an_assistant_call_gets_a_user_preamble():
    system, messages = anthropic_of(_msgs(), summary="SUM", plan="PLAN", cache_breakpoint=True)
    check_anthropic(system, messages)
    assert system == [{"type": "text", "text": "PLAN"}]
    pre = messages[0]["content"][0]
    assert pre["text"] == f"{USER_PREAMBLE_HEAD}\nSUM"
    assert pre["cache_control"] == {"type": "ephemeral"}
    # the late result moved behind its call; the open call at the end stays open
    assert messages[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "c1",
        "content": '{"ok":true}',
    }
    assert messages[2]["content"][2] == {"type": "text", "text": "[note] user idle"}
    assert messages[-1]["content"][-1]["type"] == "tool_use"
    out = json.loads(dumps(to_openai(_msgs(), ["SUM", "PLAN"])))
    check_openai(out)
    assert out[:2] == [{"role": "system", "content": "SUM"}, {"role": "system", "content": "PLAN"}]
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": '{"ok":true}'}
    assert out[5] == {"role": "user", "content": "[note] user idle"}
    assert out[-1]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_a_call_still_running_before_later_messages_gets_a_pending_result():
    msgs = [Msg(USER, text="go"), *_msgs()[:4]]
    system, messages = anthropic_of(msgs)
    check_anthropic(system, messages)
    assert messages[2]["content"][0]["content"] == PENDING_RESULT
    check_openai(json.loads(dumps(to_openai(msgs))))


def test_no_summary_and_an_assistant_first_page_still_opens_with_user():
    _, messages = anthropic_of(_msgs()[3:4])
    assert messages[0] == {
        "role": "user",
        "content": [{"type": "text", "text": USER_PREAMBLE_HEAD}],
    }
    _, later = anthropic_of(_msgs()[3:4], first=False)
    assert later[0]["role"] == "assistant"


# -- random transcripts -------------------------------------------------------------------------
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_args = st.sampled_from(["", "{}", '{"a": 1.10}', "[1, 2]", '"s"', '{"n": 12345678901234567890}'])


@st.composite
def transcripts(draw) -> list[Msg]:
    """Transcripts the domain accepts: results answer earlier calls (maybe late)."""
    out: list[Msg] = []
    open_calls: list[ToolCall] = []
    n = 0
    for _ in range(draw(st.integers(0, 24))):
        step = draw(st.sampled_from(["user", "assistant", "calls", "result", "note", "system"]))
        if step == "result" and open_calls:
            c = open_calls.pop(draw(st.integers(0, len(open_calls) - 1)))
            is_json = draw(st.booleans())
            out.append(
                Msg(
                    TOOL,
                    call_id=c.id,
                    name=c.name,
                    content='{"r": 1}' if is_json else draw(_text),
                    content_json=is_json,
                    is_error=draw(st.booleans()),
                )
            )
        elif step == "calls":
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                n += 1
                calls.append(ToolCall(f"c{n}", draw(st.sampled_from(["a", "b"])), draw(_args)))
            open_calls.extend(calls)
            out.append(Msg(ASSISTANT, text=draw(_text), tool_calls=tuple(calls)))
        elif step in ("user", "assistant", "note", "system"):
            out.append(Msg(step, text=draw(_text)))
    return out


def _kept(msgs: list[Msg], start: int) -> list[Msg] | None:
    """``msgs[start:]`` if a compaction could keep it (no kept result lost its call)."""
    kept = msgs[start:]
    calls: set[str] = set()
    for m in kept:
        calls.update(c.id for c in m.tool_calls)
        if m.kind == TOOL and m.call_id not in calls:
            return None
    return kept


@settings(max_examples=300, deadline=None)
@given(
    transcripts(),
    st.integers(0, 30),
    _text,
    _text,
    st.booleans(),
)
def test_random_transcripts_give_valid_requests_in_both_shapes(msgs, start, summary, plan, cache):
    kept = _kept(msgs, min(start, len(msgs)))
    if kept is None:
        kept = msgs
    blocks = [b for b in (summary, plan) if b]
    check_openai(json.loads(dumps(to_openai(kept, blocks))))
    system, messages = anthropic_of(kept, summary=summary, plan=plan, cache_breakpoint=cache)
    check_anthropic(system, messages)
    # and OpenAI in again gives the same OpenAI out
    once = dumps(to_openai(kept, blocks))
    assert dumps(to_openai(parse_turn(OPENAI, once).messages)) == once


@settings(max_examples=200, deadline=None)
@given(transcripts(), _text, _text)
def test_anthropic_out_appended_again_comes_back_the_same(msgs, summary, plan):
    system, messages = to_anthropic(msgs, summary=summary, plan=plan)
    again = parse_turn(ANTHROPIC, dumps(messages), dumps(system) if system else "")
    system2, messages2 = to_anthropic(again.messages)
    assert (dumps(system2), dumps(messages2)) == (dumps(system), dumps(messages))
