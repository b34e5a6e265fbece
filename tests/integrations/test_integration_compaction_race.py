"""An integration's compaction that loses the race to another compaction.

The sidecar compacts on its own after a turn (on by default) while the
integration asks for its own compaction; whichever commits second finds its
plan stale (ABORTED). Here the other compaction is made to win every time:
the model answering the integration's summary request (an OpenAI-compatible
server on loopback, or the runtime's own model) first has the conversation
compacted by another client. The integration must take the conversation as
compacted, not fail the user's turn.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("agents")
pytest.importorskip("langchain.agents")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from agents import Agent, Runner  # noqa: E402
from agents.testing import ScriptedModel, assistant_message  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from ctxd_client import AsyncClient, Client  # noqa: E402
from ctxd_client.integrations.langgraph import CtxdContextMiddleware  # noqa: E402
from ctxd_client.integrations.openai_agents import CtxdSession  # noqa: E402
from tests.support.compaction import openai_settings  # noqa: E402
from tests.support.fake_openai import FakeOpenAI, default_answer  # noqa: E402

LONG = "words " * 60


def _settings(model: FakeOpenAI) -> dict:
    # The model's answer waits for another client's whole compaction: on a
    # loaded machine that took longer than the summariser's usual 1 s.
    return openai_settings(model, summariser__openai__timeout=30.0)


@pytest.fixture
def model():
    with FakeOpenAI() as server:
        yield server


def _beaten_by_another_compaction(model: FakeOpenAI, address: str, cid: str) -> None:
    """The next summary request the integration makes is answered only after
    another client compacted the conversation (extractive)."""
    other = Client(address)
    first = len(model.requests) + 1

    def answer(body):
        if len(model.requests) == first:
            done = other.compact(cid, keep_last=2, summariser="extractive")
            assert done.compacted
        return default_answer(body)

    model.answer = answer


def _compactions(address: str, cid: str) -> list:
    with Client(address) as c:
        return list(c.get(cid).context.compactions)


async def test_agents_session_compaction_that_lost_the_race_is_done(start_sidecar, model):
    sc = start_sidecar("memory://", contexts__auto_compact=False, **_settings(model))
    s = CtxdSession("race", sc.address, keep_last=2)
    await s.add_items([{"role": "user", "content": f"item {i} {LONG}"} for i in range(12)])
    _beaten_by_another_compaction(model, sc.address, s.context_id)
    await s.run_compaction({"force": True})  # ABORTED escaped here
    got = await s.get_items()
    assert got[0]["role"] == "system"
    assert [c.summariser for c in _compactions(sc.address, s.context_id)][0] == "extractive"
    await s.close()


async def test_agents_session_runtime_summary_that_lost_the_race_is_done(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    other = AsyncClient(sc.address)
    asked: list[str] = []

    async def summarise(system_prompt: str, excerpt: str, schema: str) -> str:
        asked.append(excerpt)
        if len(asked) == 1:  # another compaction commits while the model writes
            assert (await other.compact(s.context_id, keep_last=4)).compacted
        return '{"facts": ["the runtime\'s own summary"]}'

    s = CtxdSession("race-own", sc.address, keep_last=2, summarise=summarise)
    await s.add_items([{"role": "user", "content": f"item {i} {LONG}"} for i in range(12)])
    await s.run_compaction({"force": True})  # ABORTED escaped here
    assert len(asked) == 2  # planned again on the version that won
    got = await s.get_items()
    assert "the runtime's own summary" in got[0]["content"]
    assert len(got) == 3
    await other.close()
    await s.close()


async def test_agents_runner_turn_survives_the_race(start_sidecar, model):
    sc = start_sidecar("memory://", contexts__auto_compact=False, **_settings(model))
    s = CtxdSession("race-runner", sc.address, model_window=2000, keep_last=2)
    agent = Agent(name="t", model=ScriptedModel([[assistant_message("ok " + LONG * 4)]] * 3))
    _beaten_by_another_compaction(model, sc.address, s.context_id)
    for turn in range(3):  # the SDK compacts after a turn; ABORTED escaped from it
        result = await Runner.run(agent, f"turn {turn} " + LONG * 4, session=s)
        assert result.final_output.startswith("ok")
    assert model.requests
    assert _compactions(sc.address, s.context_id)[0].summariser == "extractive"
    await s.close()


class Answers(BaseChatModel):
    """Answers every request with a long text (no tools)."""

    @property
    def _llm_type(self) -> str:
        return "answers"

    def _generate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
        reply = AIMessage(content="answer " + LONG * 4)
        return ChatResult(generations=[ChatGeneration(message=reply)])


def test_langgraph_middleware_turn_survives_the_race(start_sidecar, model):
    sc = start_sidecar("memory://", contexts__auto_compact=False, **_settings(model))
    middleware = CtxdContextMiddleware(sc.address, model_window=2000, keep_last=2)
    agent = create_agent(Answers(), middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "race-lg"}}
    _beaten_by_another_compaction(model, sc.address, "race-lg")
    for turn in range(3):  # ABORTED escaped from the invoke that compacted
        agent.invoke({"messages": [{"role": "user", "content": f"q{turn} " + LONG * 4}]}, config)
    assert model.requests
    assert _compactions(sc.address, "race-lg")[0].summariser == "extractive"


async def test_langgraph_middleware_async_own_model_survives_the_race(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    other = AsyncClient(sc.address)
    asked: list[int] = []

    class Summariser(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "summariser"

        def _generate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
            raise AssertionError("the async path calls ainvoke")

        async def _agenerate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
            asked.append(1)
            if len(asked) == 1:
                assert (await other.compact("race-lg-own", keep_last=2)).compacted
            text = '{"facts": ["summarised by the agent"]}'
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    middleware = CtxdContextMiddleware(
        sc.address, model_window=2000, keep_last=2, summary_model=Summariser()
    )
    agent = create_agent(Answers(), middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "race-lg-own"}}
    for turn in range(3):
        await agent.ainvoke(
            {"messages": [{"role": "user", "content": f"q{turn} " + LONG * 4}]}, config
        )
    assert asked
    await other.close()
