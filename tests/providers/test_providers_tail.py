"""Tail reads (``GetContext(last_n=N)``) never open inside a tool round, and
a tail read in a provider's shape, joined across its pages, is a request
the provider accepts: a result in the tail brings its call, a Responses
reasoning item stays with the function call after it, Anthropic JSON opens
with a user message, and a call left without a result before later
messages gets the stand-in, also when a page ends inside its round.
Over one real sidecar (gRPC over loopback)."""

from __future__ import annotations

import json
import random

import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.core.compaction.cut import USER_PREAMBLE_HEAD
from ctxd_sidecar.core.providers.common import PENDING_RESULT
from tests.conftest import InProcessSidecar
from tests.providers.test_providers import check_anthropic, check_openai

OPENAI, ANTHROPIC = pb.MESSAGE_FORMAT_OPENAI, pb.MESSAGE_FORMAT_ANTHROPIC
RESPONSES = pb.MESSAGE_FORMAT_OPENAI_RESPONSES
COUNT = {"reads": 0}


@pytest.fixture(scope="module")
def ctx():
    cfg = load_config(
        env={},
        overrides={"store": "memory://", "listen": "127.0.0.1:0", "contexts.auto_compact": False},
    )
    sc = InProcessSidecar(cfg)
    yield sc.running().contexts
    sc.close()
    print(f"\ntail reads checked: {COUNT}")


def append(ctx, cid: str, items: list[dict], fmt=OPENAI) -> None:
    req = pb.AppendTurnRequest(context_id=cid, format=fmt, messages_json=json.dumps(items))
    ctx.AppendTurn(req)


def read(ctx, cid: str, fmt, last_n: int, page_size: int = 0, bare: bool = False, again=True):
    """All pages of a tail read joined (an Anthropic user message continued
    across pages merged, as the clients do): (messages, system). ``again``:
    later pages send last_n again (as the clients do; it is ignored there)."""
    req = pb.GetContextRequest(
        context_id=cid,
        view=pb.CONTEXT_VIEW_SLICE,
        format=fmt,
        last_n=last_n,
        page_size=page_size,
        without_summary_blocks=bare,
    )
    messages: list = []
    system = None
    while True:
        r = ctx.GetContext(req)
        COUNT["reads"] += 1
        page = json.loads(r.messages_json)
        if fmt == ANTHROPIC and messages and page and messages[-1]["role"] == page[0]["role"]:
            messages[-1]["content"] += page.pop(0)["content"]
        messages += page
        system = system or (json.loads(r.system_json) if r.system_json else None)
        if not r.next_page_token:
            return messages, system
        req = pb.GetContextRequest(
            context_id=cid,
            view=pb.CONTEXT_VIEW_SLICE,
            format=fmt,
            page_token=r.next_page_token,
            page_size=page_size,
            without_summary_blocks=bare,
            last_n=last_n if again else 0,
        )


def _call(cid: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": "sh", "arguments": '{"n":1}'}}


def conversation(rng: random.Random) -> list[list[dict]]:
    """Turns of a random agent conversation: parallel calls, results in any
    order, some late (after other messages), some never."""
    turns: list[list[dict]] = [[{"role": "user", "content": "start"}]]
    open_: list[str] = []
    k = 0
    for _ in range(rng.randint(4, 12)):
        r = rng.random()
        if r < 0.2:
            turns.append([{"role": "user", "content": "and?"}])
        elif r < 0.3:
            turns.append([{"role": "assistant", "content": "thinking aloud"}])
        elif r < 0.6:
            ids = [f"c{k + i}" for i in range(rng.randint(1, 3))]
            k += len(ids)
            calls = [_call(c) for c in ids]
            turns.append([{"role": "assistant", "content": None, "tool_calls": calls}])
            open_ += ids
        elif open_:
            chosen = rng.sample(open_, rng.randint(1, len(open_)))
            open_ = [c for c in open_ if c not in chosen]
            turns.append([{"role": "tool", "tool_call_id": c, "content": f"r {c}"} for c in chosen])
    return turns


def test_fuzzed_tail_reads_are_valid_requests(ctx):
    invalid = total = 0
    failures = []
    for seed in range(16):
        cid = f"tail-{seed}"
        rng = random.Random(seed)
        for turn in conversation(rng):
            append(ctx, cid, turn)
        n = ctx.GetContext(pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_INFO)).info
        count = n.message_count
        for last_n in range(1, count + 1):
            for page_size in (0, 2):
                for fmt, bare in ((OPENAI, False), (ANTHROPIC, False), (ANTHROPIC, True)):
                    total += 1
                    messages, system = read(ctx, cid, fmt, last_n, page_size, bare)
                    try:
                        if fmt == OPENAI:
                            check_openai(messages)
                        else:
                            check_anthropic(system or [], messages)
                    except AssertionError as exc:
                        invalid += 1
                        failures.append((seed, last_n, page_size, fmt, bare, str(exc)[:120]))
    print(f"\n{invalid} of {total} fuzzed tail reads invalid")
    assert not failures, failures[:5]


def _tool_round(ctx, cid: str) -> None:
    """A parallel round, one call answered, then a user message."""
    append(
        ctx,
        cid,
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
            {"role": "tool", "tool_call_id": "a", "content": "ra"},
        ],
    )
    append(ctx, cid, [{"role": "user", "content": "and?"}])


def test_a_tail_opening_at_a_result_starts_at_its_call(ctx):
    _tool_round(ctx, "t-call")
    messages, _ = read(ctx, "t-call", OPENAI, last_n=2)
    assert [m["role"] for m in messages] == ["assistant", "tool", "tool", "user"]
    full = ctx.GetContext(
        pb.GetContextRequest(context_id="t-call", view=pb.CONTEXT_VIEW_FULL, last_n=2)
    ).context.messages
    assert [m.id for m in full] == ["m2", "m3", "m4"]


def test_an_anthropic_tail_without_summary_blocks_opens_with_a_user_message(ctx):
    _tool_round(ctx, "t-user")
    for bare in (False, True):
        messages, _ = read(ctx, "t-user", ANTHROPIC, last_n=3, bare=bare)
        head = {"type": "text", "text": USER_PREAMBLE_HEAD}
        assert messages[0] == {"role": "user", "content": [head]}
        assert messages[1]["role"] == "assistant"


def test_a_page_ending_inside_a_parallel_round_still_gets_the_stand_in(ctx):
    _tool_round(ctx, "t-pending")
    for fmt in (OPENAI, ANTHROPIC):
        messages, _ = read(ctx, "t-pending", fmt, last_n=4, page_size=2)
        text = json.dumps(messages)
        assert PENDING_RESULT in text, text
        whole, _ = read(ctx, "t-pending", fmt, last_n=4)
        assert messages == whole
        assert read(ctx, "t-pending", fmt, last_n=4, page_size=2, again=False)[0] == whole


def test_a_responses_tail_keeps_the_reasoning_item_with_its_function_call(ctx):
    items = [
        {"role": "user", "content": "fix it"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        {"type": "function_call", "id": "fc_1", "call_id": "k1", "name": "sh", "arguments": "{}"},
        {"type": "function_call", "id": "fc_2", "call_id": "k2", "name": "sh", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "k1", "output": "one"},
        {"type": "function_call_output", "call_id": "k2", "output": "two"},
    ]
    append(ctx, "t-rs", items, RESPONSES)
    for last_n in range(1, 6):
        got, _ = read(ctx, "t-rs", RESPONSES, last_n)
        assert got == items[1:], last_n
        for page_size in (1, 2):
            assert read(ctx, "t-rs", RESPONSES, last_n, page_size)[0] == items[1:]


@pytest.mark.parametrize("cut", [{"count": 1}, {"after_message_id": "m2"}])
def test_a_truncation_takes_the_reasoning_item_with_the_item_it_removes(ctx, cut):
    # The cut would fall right after the reasoning item (the last count, or
    # every message after it): it goes with the call it came with.
    cid = f"t-rs-pop-{next(iter(cut))}"
    items = [
        {"role": "user", "content": "fix it"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        {"type": "function_call", "id": "fc_1", "call_id": "k1", "name": "sh", "arguments": "{}"},
    ]
    append(ctx, cid, items, RESPONSES)
    out = ctx.TruncateContext(pb.TruncateContextRequest(context_id=cid, format=RESPONSES, **cut))
    assert json.loads(out.removed_json) == items[1:]
    assert read(ctx, cid, RESPONSES, 0)[0] == items[:1]
