"""The Python agent example (examples/python-agent) run for real: a real
sidecar, an OpenAI-compatible HTTP server on loopback standing in for the
model, the ctxd client from this repository. The agent reads the
conversation once; each turn after that is one call (AppendTurn with its
read), compactions included."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.clients.test_python_client import served
from tests.support.fake_openai import FakeOpenAI

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AGENT = os.path.join(ROOT, "examples", "python-agent", "agent.py")
SUMMARY = "Summary of earlier conversation"
LINES = [
    f"question {i}: " + " ".join(["tell me about the lighthouse keeper"] * 6) for i in range(8)
]


def _answer(body: dict) -> str:
    """The model's reply names how many messages it was sent."""
    return f"answer to {body['messages'][-1]['content'][:11]} after {len(body['messages'])}"


def test_the_agent_holds_its_history_and_turns_in_one_call(start_sidecar, store_uri_for):
    sc = start_sidecar(
        store_uri_for("lmdb"),
        contexts__default_model_window=1200,
        contexts__keep_last=2,
    )
    with FakeOpenAI() as model:
        model.answer = _answer
        reads, turns = served("GetContext", "OK", "NOT_FOUND"), served("AppendTurn")
        proc = subprocess.run(
            [sys.executable, AGENT],
            input="\n".join(LINES) + "\n\n",
            env={
                **os.environ,
                "CTXD_ADDRESS": sc.address,
                "OPENAI_BASE_URL": model.base_url,
                "CONTEXT_ID": "agent",
                "MODEL": "local-model",  # unknown: the default window applies
                "PYTHONPATH": os.path.join(ROOT, "clients", "python"),
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        # One read, the first (NOT_FOUND: a new conversation); every turn read itself.
        assert served("GetContext", "OK", "NOT_FOUND") - reads == 1
        assert served("AppendTurn") - turns == 2 * len(LINES)
        sent = [r.body["messages"] for r in model.requests]

    assert len(sent) == len(LINES)
    grown = replaced = 0
    for i in range(1, len(sent)):
        prev, cur = sent[i - 1][1:], sent[i][1:]  # after the agent's system prompt
        exchange = [
            {"role": "assistant", "content": _answer({"messages": sent[i - 1]})},
            {"role": "user", "content": LINES[i]},
        ]
        if cur == prev + exchange:
            grown += 1  # the turn's read appended just the exchange
        else:
            # Compacted in between: the read brought the whole kept tail.
            assert cur[-1] == exchange[-1], (i, cur, exchange)
            assert len(cur) < len(prev) + 2
            replaced += 1
    assert grown and replaced, (grown, replaced)
    # The system prompt (RenderPrompt) carries the summary; the slice, read
    # without_summary_blocks, does not: each request holds it once.
    summarised = [r for r in sent if SUMMARY in r[0]["content"]]
    assert summarised, "no compaction reached the model: the check below proved nothing"
    for request in sent:
        held = sum(SUMMARY in (m["content"] or "") for m in request)
        assert held <= 1, f"the summary is sent {held} times"
