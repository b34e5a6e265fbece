"""CtxdContextMiddleware in a real ``create_agent`` graph (LangChain's own
agent loop, LangGraph's own checkpointer) with a scripted chat model, on a
real sidecar: 200 turns with a tool call each. ctxd holds every message
(the live FULL view plus what each compaction folded, through
ExpandCompaction), the checkpoint's ``messages`` channel stays under a
bound, and every request the model received is a valid OpenAI chat
request."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from langchain.agents import create_agent  # noqa: E402
from langchain_core.callbacks import CallbackManagerForLLMRun  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from ctxd_client import Client  # noqa: E402
from ctxd_client.integrations.langgraph import CtxdContextMiddleware  # noqa: E402

TURNS = 200
#: The model window the middleware declares (tokens): ctxd compacts at 0.7
#: of it, so the slice, and with it the checkpoint, stays under 5,600 tokens
#: (the summary and about 170 of these messages) however long the
#: conversation grows.
WINDOW = 8000
BOUND = 180
#: Every request the scripted model received, as OpenAI chat messages.
REQUESTS: list[list[dict]] = []


class ScriptedToolModel(BaseChatModel):
    """Calls ``lookup`` once per user message, then answers; records requests."""

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-model"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedToolModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        REQUESTS.append(convert_to_openai_messages(messages))
        last = messages[-1]
        n = len(REQUESTS)
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=f"answer {n}: {last.content} " + "detail " * 20)
        else:
            call = {"id": f"call_{n}", "name": "lookup", "args": {"topic": str(last.content)}}
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"facts about {topic[:40]} " + "fact " * 20


def _provider_valid(request: list[dict]) -> None:
    """The checks an OpenAI chat request must pass, on what the model got."""
    roles = {"system", "user", "assistant", "tool"}
    open_calls: set[str] = set()
    for i, m in enumerate(request):
        assert m["role"] in roles, m
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, f"result without its call at {i}"
            open_calls.discard(m["tool_call_id"])
            continue
        assert not open_calls, f"calls {open_calls} unanswered before message {i}"
        if m["role"] == "assistant":
            open_calls = {c["id"] for c in m.get("tool_calls", [])}
    assert not open_calls
    assert request[-1]["role"] in ("user", "tool")


def test_two_hundred_turns_keep_the_checkpoint_bounded(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    REQUESTS.clear()
    middleware = CtxdContextMiddleware(sc.address, model_window=WINDOW, keep_last=16)
    saver = InMemorySaver()
    agent = create_agent(
        ScriptedToolModel(),
        tools=[lookup],
        system_prompt="You are a research assistant.",
        middleware=[middleware],
        checkpointer=saver,
    )
    config = {"configurable": {"thread_id": "research-1"}}
    held_sizes = []
    for turn in range(TURNS):
        agent.invoke({"messages": [{"role": "user", "content": f"question {turn}"}]}, config)
        held_sizes.append(len(agent.get_state(config).values["messages"]))
    assert max(held_sizes) <= BOUND, max(held_sizes)
    # Bounded, not merely slow: the second half holds no more than the first.
    assert max(held_sizes[TURNS // 2 :]) <= max(held_sizes[: TURNS // 2])
    assert len(REQUESTS) == 2 * TURNS
    for request in REQUESTS:
        _provider_valid(request)
        assert request[0] == {"role": "system", "content": "You are a research assistant."}
    with Client(sc.address) as c:
        record = c.get("research-1").context
        folded = []
        for comp in record.compactions:
            folded += c.expand_compaction("research-1", comp.id).messages
        every = [*folded, *record.messages]
    assert len(record.compactions) >= 5
    assert [m.id for m in every] == [f"m{i}" for i in range(1, 4 * TURNS + 1)]
    users = [m.user.text for m in every if m.WhichOneof("kind") == "user"]
    assert users == [f"question {t}" for t in range(TURNS)]
    calls = [m for m in every if m.WhichOneof("kind") == "assistant" and m.assistant.tool_calls]
    results = [m for m in every if m.WhichOneof("kind") == "tool"]
    assert len(calls) == len(results) == TURNS


async def test_async_agent_and_the_agents_own_model_summarising(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    REQUESTS.clear()

    class Summariser(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "summariser"

        def _generate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
            text = '{"goals": ["answer questions"], "facts": ["asked about many topics"]}'
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    middleware = CtxdContextMiddleware(
        sc.address, model_window=2000, keep_last=6, summary_model=Summariser()
    )
    agent = create_agent(
        ScriptedToolModel(), tools=[lookup], middleware=[middleware], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "async-1"}}
    for turn in range(16):
        await agent.ainvoke({"messages": [{"role": "user", "content": f"q{turn}"}]}, config)
    for request in REQUESTS:
        _provider_valid(request)
    last = REQUESTS[-1]
    assert last[0]["role"] == "system" and "asked about many topics" in last[0]["content"]
    with Client(sc.address) as c:
        record = c.get("async-1").context
        assert record.compactions and record.compactions[-1].summariser == "runtime"
        assert record.summary.facts == ["asked about many topics"]


def test_a_thread_is_required(start_sidecar):
    sc = start_sidecar("memory://")
    agent = create_agent(
        ScriptedToolModel(), tools=[lookup], middleware=[CtxdContextMiddleware(sc.address)]
    )
    with pytest.raises(ValueError, match="thread_id"):
        agent.invoke({"messages": [{"role": "user", "content": "hi"}]})


def test_a_thread_branches_by_forking_its_context(start_sidecar, store_uri_for):
    """A new thread id whose context is a fork of another thread's: its
    first step sees the forked conversation; neither thread sees the other's."""
    sc = start_sidecar(store_uri_for("lmdb"), contexts__auto_compact=False)
    REQUESTS.clear()
    agent = create_agent(
        ScriptedToolModel(),
        tools=[lookup],
        middleware=[CtxdContextMiddleware(sc.address, model_window=100_000)],
        checkpointer=InMemorySaver(),
    )

    def ask(thread: str, text: str) -> list[str]:
        agent.invoke({"messages": [{"role": "user", "content": text}]}, _thread(thread))
        return [m["content"] for m in REQUESTS[-1] if m["role"] == "user"]

    with Client(sc.address) as c:
        ask("main", "question 0")
        at = c.get("main").info.version
        ask("main", "question 1")
        c.fork("main", "retry", at_version=at)  # the thread "retry", branched after question 0
        c.fork("main", "later")
        assert ask("retry", "another question 1") == ["question 0", "another question 1"]
        assert ask("later", "question 2b") == ["question 0", "question 1", "question 2b"]
        assert ask("main", "question 2") == ["question 0", "question 1", "question 2"]


def _thread(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}
