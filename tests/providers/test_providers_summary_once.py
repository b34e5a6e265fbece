"""The summary and plan once per request: a runtime that sends RenderPrompt's
prompt as its system prompt reads the slice without the summary and plan
blocks (GetContextRequest.without_summary_blocks), in every format, through
the Python client's one-call turn; the Anthropic cache breakpoint still
marks the end of the slice's system text. Over real gRPC."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "python"
if str(PACKAGE) not in sys.path:  # the suite's venv holds the server only: import from source
    sys.path.insert(0, str(PACKAGE))

from ctxd_client import Client  # noqa: E402

GOAL = "ship-the-billing-migration"
PLAN_GOAL = "plan-goal-cutover"
FILLER = "lorem ipsum dolor sit amet " * 10


@pytest.fixture
def running(start_sidecar, tmp_path):
    sc = start_sidecar(f"lmdb://{tmp_path / 'once'}", contexts__auto_compact=False)
    ctx = sc.contexts
    turns = []
    for i in range(8):
        turns.append({"role": "user", "content": f"step {i}"})
        turns.append({"role": "assistant", "content": f"done {i}. {FILLER}"})
    ctx.AppendTurn(
        pb.AppendTurnRequest(
            context_id="once", messages_json=json.dumps(turns), format=pb.MESSAGE_FORMAT_OPENAI
        )
    )
    plan = ctx.PlanCompaction(pb.PlanCompactionRequest(context_id="once", keep_last=4))
    ctx.ApplyCompaction(
        pb.ApplyCompactionRequest(
            context_id="once", plan_ref=plan.plan_ref, answer=json.dumps({"goals": [GOAL]})
        )
    )
    ctx.UpdatePlan(
        pb.UpdatePlanRequest(
            context_id="once",
            create=pb.PlanCreate(goal=PLAN_GOAL, items=[pb.PlanItemSpec(title="cut over")]),
        )
    )
    return sc


def count(texts, needle: str) -> int:
    return sum(json.dumps(t).count(needle) for t in texts)


@pytest.mark.parametrize("fmt", ["ctxd", "openai", "anthropic"])
def test_the_summary_and_plan_come_once_with_render_prompt(running, fmt):
    with Client(running.address) as c:
        prompt = c.render_prompt("once").prompt
        assert prompt.count(GOAL) == 1 and prompt.count(PLAN_GOAL) == 1
        # Without the flag the slice repeats them (what the flag is for).
        whole = c.slice("once", format=fmt)
        text = [str(m) for m in whole] if fmt == "ctxd" else list(whole)
        assert count(text + [whole.system or []], GOAL) == 1
        held = c.slice("once", format=fmt, without_summary_blocks=True, cache_breakpoint=True)
        t = c.turn(
            "once",
            [{"role": "user", "content": "next?"}] if fmt != "ctxd" else [{"user": {"text": "n"}}],
            format=fmt if fmt != "ctxd" else "ctxd",
            since_version=held.version,
            without_summary_blocks=True,
            cache_breakpoint=True,
        )
        assert t.next.change == "append"
        request = (
            [str(m) for m in [*held, *t.next.messages]]
            if fmt == "ctxd"
            else [*held, *t.next.messages, held.system or []]
        )
        assert count([prompt, *request], GOAL) == 1
        assert count([prompt, *request], PLAN_GOAL) == 1
        if fmt == "anthropic":
            first = held[0]
            assert first["role"] == "user"
            assert not any("cache_control" in json.dumps(m) for m in held)  # no system text
