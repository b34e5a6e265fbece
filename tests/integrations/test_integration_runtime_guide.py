"""The runtime guide's step "before each model call", followed as written,
sends the summary once: a runtime that sends RenderPrompt's prompt as its
system prompt is told which slice flag leaves the summary and plan blocks
out, and with it each request holds the summary exactly once (over real
gRPC, on a real sidecar). The framework integrations read the slice only
(no RenderPrompt), where the summary comes once as well."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))

from ctxd_client import Client  # noqa: E402

GOAL = "ship-the-billing-migration"


def _step_before_each_model_call() -> str:
    guide = (ROOT / "docs" / "runtime.md").read_text()
    start = guide.index("2. **Before each model call**")
    return guide[start : guide.index("3. **After each model call**", start)]


def test_the_guide_says_how_a_render_prompt_runtime_reads_the_slice(start_sidecar):
    step = _step_before_each_model_call()
    assert "RenderPrompt" in step
    flag = re.search(r"`(\w+) = true`", step)
    assert flag, "the step never names the slice flag a RenderPrompt runtime sets"
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    with Client(sc.address) as c:
        turns = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i} " + "x " * 40}
            for i in range(12)
        ]
        c.append_turn("guide", turns, format="openai")
        plan = c.plan_compaction("guide", keep_last=4)
        c.apply_compaction("guide", plan.plan_ref, json.dumps({"goals": [GOAL]}))
        system = c.render_prompt("guide").prompt
        assert system.count(GOAL) == 1
        held = c.slice("guide", format="openai", **{flag.group(1): True})
        request = [{"role": "system", "content": system}, *held]
        assert json.dumps(request).count(GOAL) == 1
        # Without the flag the summary would be sent twice (what the step warns of).
        assert json.dumps([system, *c.slice("guide", format="openai")]).count(GOAL) == 2


@pytest.mark.parametrize("integration", ["openai-agents", "langgraph"])
async def test_the_integrations_send_the_summary_once(start_sidecar, integration):
    pytest.importorskip("agents" if integration == "openai-agents" else "langchain.agents")
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    with Client(sc.address) as c:
        turns = [{"role": "user", "content": f"step {i} " + "x " * 40} for i in range(12)]
        c.append_turn("once", turns, format="openai")
        plan = c.plan_compaction("once", keep_last=4)
        c.apply_compaction("once", plan.plan_ref, json.dumps({"goals": [GOAL]}))
    if integration == "openai-agents":
        from ctxd_client.integrations.openai_agents import CtxdSession

        session = CtxdSession("once", sc.address)
        sent = await session.get_items()
        await session.close()
    else:
        from ctxd_client.integrations._langgraph_middleware import _message

        with Client(sc.address) as c:
            sent = [m.model_dump() for m in map(_message, c.slice("once"))]
    assert json.dumps(sent).count(GOAL) == 1
