"""The framework examples (examples/openai-agents, examples/langgraph) run
for real: a real sidecar, the OpenAI-compatible server on loopback standing
in for the model, each example as its own process. The second run of each
carries on the conversation the first left in ctxd."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.fake_openai import FakeOpenAI

pytest.importorskip("agents")
pytest.importorskip("langchain_openai")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

from ctxd_client import Client  # noqa: E402

EXAMPLES = {
    "openai-agents": (
        os.path.join(ROOT, "examples", "openai-agents", "session_agent.py"),
        "SESSION_ID",
    ),  # noqa: E501
    "langgraph": (os.path.join(ROOT, "examples", "langgraph", "context_agent.py"), "THREAD_ID"),
}


def _answer(body: dict) -> str:
    users = [m for m in body["messages"] if m["role"] == "user"]
    return f"reply {len(users)} to {users[-1]['content']}"


def _run(path: str, env: dict, lines: list[str]) -> list[str]:
    proc = subprocess.run(
        [sys.executable, path],
        input="\n".join(lines) + "\n\n",
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_keeps_its_conversation_in_ctxd(start_sidecar, store_uri_for, name):
    path, id_var = EXAMPLES[name]
    sc = start_sidecar(store_uri_for("lmdb"), contexts__auto_compact=False)
    with FakeOpenAI() as model:
        model.answer = _answer
        env = {
            **os.environ,
            "CTXD_ADDRESS": sc.address,
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "sk-local",
            "OPENAI_AGENTS_DISABLE_TRACING": "1",
            "MODEL": "local-model",
            id_var: "chat-1",
            "PYTHONPATH": os.path.join(ROOT, "clients", "python"),
        }
        first = _run(path, env, ["hello", "what did I say?"])
        second = _run(path, env, ["and now?"])
        sent = [r.body["messages"] for r in model.requests]
    assert first == ["reply 1 to hello", "reply 2 to what did I say?"]
    # A new process: the history came from ctxd.
    assert second == ["reply 3 to and now?"]
    assert [m["content"] for m in sent[-1] if m["role"] == "user"] == [
        "hello",
        "what did I say?",
        "and now?",
    ]
    with Client(sc.address) as c:
        kinds = [m.WhichOneof("kind") for m in c.get("chat-1").context.messages]
        assert kinds == ["user", "assistant"] * 3
        if name == "langgraph":
            notes = [r.key for r in c.memory_list("langgraph-store/notes/")]
            assert len(notes) == 3
