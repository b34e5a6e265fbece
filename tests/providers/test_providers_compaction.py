"""Every compaction makes the context smaller and truer: the extractive
summariser keeps ``open`` honest (a question answered later is not open, a
later compaction closes what the conversation went on to answer), and a
compaction that would make the context larger is declined with the reason
by Compact, changing nothing (ApplyCompaction applies the runtime's own
answer as given and says what it did). Over real gRPC, plus the pure merge rules."""

from __future__ import annotations

import json

import pytest

from ctxd_plugins.extractive_summariser import extract
from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.compaction import MessageData, Summary, merge, parse_answer


def test_a_question_answered_in_the_folded_span_is_not_open():
    msgs = [
        MessageData("user", "m1", text="Which database do we use?"),
        MessageData("assistant", "m2", text="Postgres 16, on db-1."),
        MessageData("user", "m3", text="And the port?"),
    ]
    s = extract(msgs)
    assert s.open == ["asked: And the port?"]


def test_a_reply_closes_the_questions_the_summary_still_had_open():
    previous = Summary(open=["asked: And the port?", "tool call x abandoned"])
    msgs = [MessageData("assistant", "m4", text="Port 5432.")]
    s = extract(msgs, previous=previous)
    assert s.closed == ["asked: And the port?"]
    merged = merge(previous, s)
    assert merged.open == ["tool call x abandoned"]
    assert "closed" not in merged.to_dict()


def test_an_answer_may_close_items():
    answer = parse_answer(json.dumps({"facts": ["port is 5432"], "closed": ["which port?"]}))
    merged = merge(Summary(open=["asked: which port?", "write the runbook"]), answer)
    assert merged.open == ["write the runbook"]


def _turn(ctx, cid, *msgs):
    ctx.AppendTurn(pb.AppendTurnRequest(context_id=cid, messages=list(msgs)))


def _user(text):
    return pb.Message(user=pb.UserMessage(text=text))


def _assistant(text):
    return pb.Message(assistant=pb.AssistantMessage(text=text))


@pytest.fixture
def ctx(start_sidecar, tmp_path):
    return start_sidecar(f"lmdb://{tmp_path / 'c'}", contexts__auto_compact=False).contexts


def test_answered_questions_never_pile_up_and_every_compaction_shrinks(ctx):
    for i in range(40):
        _turn(
            ctx,
            "qa",
            _user(f"Question {i}: what is the value of setting s{i}?"),
            _assistant(f"Setting s{i} is {i * 7}; it was read from the config file " * 2),
        )
        if i % 5 == 4:
            r = ctx.Compact(pb.CompactRequest(context_id="qa", keep_last=2))
            assert r.compacted, r.reason
            assert r.tokens_after < r.tokens_before
            # Only the question whose reply is kept verbatim may still be open.
            assert len(r.summary.open) <= 1, list(r.summary.open)


def test_a_compaction_that_would_grow_the_context_is_declined(ctx):
    _turn(ctx, "tiny", _user("hi?"), _assistant("yo"))
    _turn(ctx, "tiny", _user("ok"), _assistant("k"))
    before = ctx.GetContext(pb.GetContextRequest(context_id="tiny"))
    r = ctx.Compact(pb.CompactRequest(context_id="tiny", keep_last=2))
    assert not r.compacted and "never makes a context larger" in r.reason, r.reason
    after = ctx.GetContext(pb.GetContextRequest(context_id="tiny"))
    assert after.context == before.context
    # The runtime's own answer is applied as given; the reply says what it did.
    p = ctx.PlanCompaction(pb.PlanCompactionRequest(context_id="tiny", keep_last=2))
    long_answer = {"facts": [f"fact number {i} that nobody needs" for i in range(20)]}
    applied = ctx.ApplyCompaction(
        pb.ApplyCompactionRequest(
            context_id="tiny", plan_ref=p.plan_ref, answer=json.dumps(long_answer)
        )
    )
    assert applied.tokens_after > applied.tokens_before
