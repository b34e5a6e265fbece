"""CtxdSession against the OpenAI Agents SDK's own session behaviours.

The generic behaviours of the SDK's session test modules
(openai-agents-python ``tests/extensions/memory/test_redis_session.py`` and
``tests/memory/test_session.py``: direct operations, isolation, limit, pop
on empty, empty add, unicode and special characters, concurrent access,
session settings, list input and the input callback, the Runner's run /
run_sync / run_streamed), adapted to a real sidecar over gRPC and the SDK's
own scripted model (``agents.testing.ScriptedModel``); then what ctxd adds:
every Responses item type exact, an atomic pop, compaction through ctxd,
and two sidecars on one S3 bucket serving one session.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("agents")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from agents import Agent, RunConfig, Runner, function_tool  # noqa: E402
from agents.memory import SessionSettings  # noqa: E402
from agents.memory.session import (  # noqa: E402
    Session,
    is_openai_responses_compaction_aware_session,
)
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

from ctxd_client import AsyncClient, Client  # noqa: E402
from ctxd_client.integrations.openai_agents import CtxdSession  # noqa: E402
from tests.support.responses_corpus import corpus  # noqa: E402

RUNNERS = ["run", "run_sync", "run_streamed"]


@pytest.fixture
def address(start_sidecar) -> str:
    return start_sidecar("memory://", contexts__auto_compact=False).address


@pytest.fixture
async def make_session(address):
    """Factory of sessions on the sidecar (address: a client per event loop)."""
    made: list[CtxdSession] = []

    def make(session_id: str, **kw) -> CtxdSession:
        s = CtxdSession(session_id, address, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        await s.close()


def _run_sync(agent, data, **kw):
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return Runner.run_sync(agent, data, **kw)
    finally:
        loop.close()


async def run_agent(method: str, agent, data, **kw):
    if method == "run":
        return await Runner.run(agent, data, **kw)
    if method == "run_sync":
        return await asyncio.to_thread(_run_sync, agent, data, **kw)
    result = Runner.run_streamed(agent, data, **kw)
    async for _ in result.stream_events():
        pass
    return result


def _contents(items) -> list:
    return [i.get("content") for i in items]


# -- the SDK's generic session behaviours ------------------------------------------------------
async def test_is_an_sdk_session(make_session):
    s = make_session("proto")
    assert isinstance(s, Session)
    assert is_openai_responses_compaction_aware_session(s)


async def test_direct_ops(make_session):
    s = make_session("direct")
    await s.add_items(
        [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}]
    )  # noqa: E501
    got = await s.get_items()
    assert _contents(got) == ["Hello", "Hi there!"]
    popped = await s.pop_item()
    assert popped == {"role": "assistant", "content": "Hi there!"}
    assert _contents(await s.get_items()) == ["Hello"]
    await s.clear_session()
    assert await s.get_items() == []


@pytest.mark.parametrize("method", RUNNERS)
async def test_runner_two_turns_see_the_history(make_session, method):
    s = make_session(f"runner-{method}")
    model = ScriptedModel([[assistant_message("San Francisco")], [assistant_message("California")]])
    agent = Agent(name="test", model=model)
    r1 = await run_agent(method, agent, "What city is the Golden Gate Bridge in?", session=s)
    assert r1.final_output == "San Francisco"
    r2 = await run_agent(method, agent, "What state is it in?", session=s)
    assert r2.final_output == "California"
    last = model.last_call.input
    assert len(last) > 1
    assert any("Golden Gate Bridge" in str(i.get("content", "")) for i in last)
    stored = await s.get_items()
    assert _contents(stored)[0] == "What city is the Golden Gate Bridge in?"
    assert len(stored) == 4


@pytest.mark.parametrize("method", RUNNERS)
async def test_session_isolation(make_session, method):
    one, two = make_session(f"iso-1-{method}"), make_session(f"iso-2-{method}")
    model = ScriptedModel(
        [
            [assistant_message("I like cats.")],
            [assistant_message("I like dogs.")],
            [assistant_message("You said you like cats.")],
        ]
    )
    agent = Agent(name="test", model=model)
    await run_agent(method, agent, "I like cats.", session=one)
    await run_agent(method, agent, "I like dogs.", session=two)
    result = await run_agent(method, agent, "What animal did I say I like?", session=one)
    assert "cats" in result.final_output.lower()
    seen = json.dumps(model.last_call.input)
    assert "cats" in seen and "dogs" not in seen


async def test_get_items_with_limit(make_session):
    s = make_session("limit")
    await s.add_items(
        [{"role": r, "content": str(i)} for i, r in enumerate(["user", "assistant"] * 2, 1)]
    )  # noqa: E501
    assert _contents(await s.get_items(limit=2)) == ["3", "4"]
    assert len(await s.get_items()) == 4
    assert len(await s.get_items(limit=10)) == 4
    assert await s.get_items(limit=0) == []


async def test_get_items_with_limit_never_starts_inside_a_tool_round(make_session):
    s = make_session("limit-round")
    step = [
        {"id": "rs_1", "type": "reasoning", "summary": []},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
    ]
    answer = {"role": "assistant", "content": "done"}
    items = [{"role": "user", "content": "go"}, *step, answer]
    await s.add_items(items)
    for limit in (2, 3, 4, 5):  # the last N would begin with an output or a call cut off
        assert await s.get_items(limit=limit) == [answer], limit
    assert await s.get_items(limit=6) == items[-6:]  # the whole step
    assert await s.get_items(limit=7) == items


async def test_pop_from_empty_session(make_session):
    s = make_session("empty")
    await s.clear_session()
    assert await s.pop_item() is None
    await s.add_items([{"role": "user", "content": "x"}])
    assert (await s.pop_item())["content"] == "x"
    assert await s.pop_item() is None


async def test_add_empty_items_list(make_session):
    s = make_session("empty-add")
    assert await s.get_items() == []
    await s.add_items([])
    assert await s.get_items() == []


async def test_unicode_content(make_session):
    s = make_session("unicode")
    items = [
        {"role": "user", "content": "こんにちは"},
        {"role": "assistant", "content": "😊👍"},
        {"role": "user", "content": "Привет"},
    ]
    await s.add_items(items)
    assert await s.get_items() == items


@pytest.mark.parametrize(
    "texts",
    [
        ["O'Reilly", '{"nested": "json"}', 'Quote: "Hello world"', "Line1\nLine2\tTabbed"],
        [
            "DROP TABLE sessions;",
            '"SELECT * FROM users WHERE name = "admin";"',
            "Robert'); DROP TABLE students;--",
            "\\n\\t\\r Special escapes",
            "nul \u0000 and bell \u0007",
        ],
    ],
    ids=["special-characters", "problematic-strings"],
)
async def test_special_characters_and_data_integrity(make_session, texts):
    s = make_session(f"special-{len(texts)}")
    items = [{"role": "user" if i % 2 else "assistant", "content": t} for i, t in enumerate(texts)]
    await s.add_items(items)
    assert await s.get_items() == items


async def test_concurrent_access_keeps_every_batch_whole_and_contiguous(make_session):
    s = make_session("concurrent")

    async def add(start: int, count: int) -> None:
        await s.add_items(
            [{"role": "user", "content": f"Message {start + i}"} for i in range(count)]
        )  # noqa: E501

    await asyncio.gather(*(add(i * 5, 5) for i in range(20)))
    contents = _contents(await s.get_items())
    assert sorted(contents, key=lambda c: int(c.split()[1])) == [f"Message {i}" for i in range(100)]
    for k in range(0, 100, 5):  # each batch is five contiguous items
        first = int(contents[k].split()[1])
        assert first % 5 == 0
        assert contents[k : k + 5] == [f"Message {first + i}" for i in range(5)]


async def test_pop_several_and_sessions_apart(make_session):
    one, two = make_session("pop-1"), make_session("pop-2")
    await one.add_items([{"role": "user", "content": "Session 1 message"}])
    items = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there!"},
        {"role": "user", "content": "How are you?"},
    ]
    await two.add_items(items)
    for expected in reversed(items):
        assert await two.pop_item() == expected
    assert await two.pop_item() is None
    assert _contents(await one.get_items()) == ["Session 1 message"]


async def test_session_settings(make_session):
    assert make_session("settings-default").session_settings.limit is None
    s = make_session("settings-limit", session_settings=SessionSettings(limit=3))
    await s.add_items([{"role": "user", "content": f"Message {i}"} for i in range(10)])
    assert _contents(await s.get_items()) == ["Message 7", "Message 8", "Message 9"]
    assert _contents(await s.get_items(limit=2)) == ["Message 8", "Message 9"]


async def test_runner_with_session_settings_override(make_session):
    s = make_session("override", session_settings=SessionSettings(limit=100))
    await s.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)])
    model = ScriptedModel([[assistant_message("Got it")]])
    await Runner.run(
        Agent(name="t", model=model),
        "New question",
        session=s,
        run_config=RunConfig(session_settings=SessionSettings(limit=2)),
    )
    history = [i for i in model.last_call.input if i.get("content") != "New question"]
    assert _contents(history) == ["Turn 8", "Turn 9"]


@pytest.mark.parametrize("method", RUNNERS)
async def test_list_input_is_appended_to_the_history(make_session, method):
    s = make_session(f"list-{method}")
    history = [{"role": "user", "content": "Earlier"}, {"role": "assistant", "content": "Saved"}]
    await s.add_items(history)
    model = ScriptedModel([[assistant_message("ok")]])
    new = [{"role": "user", "content": "Test message"}]
    await run_agent(method, Agent(name="t", model=model), new, session=s)
    assert model.last_call.input == history + new


@pytest.mark.parametrize("method", RUNNERS)
async def test_session_input_callback(make_session, method):
    s = make_session(f"callback-{method}")
    history = [{"role": "user", "content": "Hello there."}, {"role": "assistant", "content": "Hi"}]
    await s.add_items(history)
    model = ScriptedModel([[assistant_message("I'm a model")]])
    new = [{"role": "user", "content": "What is your name?"}]

    def users_only(held, new_input):
        return [i for i in held if i["role"] == "user"] + new_input

    await run_agent(
        method,
        Agent(name="t", model=model),
        new,
        session=s,
        run_config=RunConfig(session_input_callback=users_only),
    )
    assert model.last_call.input == [history[0], new[0]]


# -- what ctxd adds ------------------------------------------------------------------------------
@pytest.mark.parametrize("method", RUNNERS)
async def test_runner_tool_call_round_trips_every_item(make_session, method):
    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    model = ScriptedModel(
        [
            [function_call("get_weather", {"city": "Zürich"}, call_id="call_1")],
            [assistant_message("It is sunny.")],
            [assistant_message("You asked about Zürich.")],
        ]
    )
    agent = Agent(name="t", model=model, tools=[get_weather])
    s = make_session(f"tools-{method}")
    await run_agent(method, agent, "Weather in Zürich?", session=s)
    stored = await s.get_items()
    kinds = [i.get("type", "message") for i in stored]
    assert kinds == ["message", "function_call", "function_call_output", "message"]
    assert stored[2]["output"] == "sunny in Zürich"
    await run_agent(method, agent, "What did I ask?", session=s)
    assert model.last_call.input[: len(stored)] == stored


async def test_every_responses_item_round_trips_through_the_session(make_session):
    s = make_session("corpus")
    items = corpus()
    await s.add_items(items[:10])
    await s.add_items(items[10:])
    assert json.dumps(await s.get_items(), sort_keys=True) == json.dumps(items, sort_keys=True)
    assert await s.get_items(limit=3) == items[-3:]
    assert await s.pop_item() == items[-1]
    assert await s.get_items() == items[:-1]


async def test_session_ids_of_any_text_are_apart(make_session):
    a, b = make_session("user/1 ☃"), make_session("user_2f1 ☃")
    await a.add_items([{"role": "user", "content": "a"}])
    await b.add_items([{"role": "user", "content": "b"}])
    assert _contents(await a.get_items()) == ["a"] and _contents(await b.get_items()) == ["b"]
    long = make_session("x" * 500)
    await long.add_items([{"role": "user", "content": "long"}])
    assert _contents(await long.get_items()) == ["long"]


async def test_forced_compaction_gives_the_summary_then_the_kept_items(make_session):
    s = make_session("compact", keep_last=2)
    items = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i} " + "x " * 50}
        for i in range(12)
    ]  # noqa: E501
    await s.add_items(items)
    await s.run_compaction({"response_id": "resp_1"})  # not due: nothing happens
    assert await s.get_items() == items
    await s.run_compaction({"force": True})
    got = await s.get_items()
    assert got[0]["role"] == "system" and "step" in got[0]["content"]
    assert got[1:] == items[-2:]


async def test_pop_item_after_a_compaction_pops_what_get_items_shows(make_session):
    s = make_session("pop-compacted", keep_last=2)
    items = [{"role": "user", "content": f"step {i} " + "x " * 50} for i in range(8)]
    await s.add_items(items)
    await s.run_compaction({"force": True})
    summary, *kept = await s.get_items()
    assert kept == items[-2:]
    for expected in reversed(kept):
        assert await s.pop_item() == expected
    assert await s.get_items() == [summary]
    assert await s.pop_item() == summary  # the most recent item left
    assert await s.get_items() == []
    assert await s.pop_item() is None
    await s.add_items([{"role": "user", "content": "again"}])
    assert await s.get_items() == [{"role": "user", "content": "again"}]


async def test_compaction_with_the_agents_own_model(make_session):
    seen: list[str] = []

    async def summarise(system_prompt: str, excerpt: str, schema: str) -> str:
        seen.append(excerpt)
        return json.dumps({"goals": ["plan a trip"], "facts": ["the user likes trains"]})

    s = make_session("compact-own", keep_last=2, summarise=summarise)
    items = [{"role": "user", "content": f"note {i}"} for i in range(8)]
    await s.add_items(items)
    await s.run_compaction({"force": True})
    got = await s.get_items()
    assert "note 0" in seen[0]
    assert "the user likes trains" in got[0]["content"]
    assert got[1:] == items[-2:]


async def test_auto_compaction_runs_when_the_turn_passed_the_threshold(make_session):
    s = make_session("auto", model_window=2000, keep_last=2)
    model = ScriptedModel([[assistant_message("noted " + "y " * 400)] for _ in range(4)])
    agent = Agent(name="t", model=model)
    for i in range(4):
        await Runner.run(agent, f"turn {i} " + "z " * 400, session=s)
    got = await s.get_items()
    assert got[0]["role"] == "system"  # the summary leads
    assert len(got) < 8


async def test_two_sidecars_on_one_bucket_keep_concurrent_batches_whole(
    start_sidecar, store_uri_for
):
    uri = store_uri_for("s3")
    a = start_sidecar(uri, contexts__auto_compact=False)
    b = start_sidecar(uri, contexts__auto_compact=False)
    sessions = [CtxdSession("shared", a.address), CtxdSession("shared", b.address)]

    async def add(k: int) -> None:
        batch = [{"role": "user", "content": f"b{k}-{i}"} for i in range(4)]
        await sessions[k % 2].add_items(batch)

    await asyncio.gather(*(add(k) for k in range(16)))
    for s in sessions:
        contents = _contents(await s.get_items())
        assert len(contents) == 64
        for j in range(0, 64, 4):
            k = contents[j].split("-")[0]
            assert contents[j : j + 4] == [f"{k}-{i}" for i in range(4)]
        await s.close()
    with Client(a.address) as c:  # the sync client sees the same
        assert c.info("shared").message_count == 64


async def test_a_passed_client_is_used_and_left_open(address):
    client = AsyncClient(address)
    s = CtxdSession("own-client", client)
    await s.add_items([{"role": "user", "content": "x"}])
    await s.close()
    assert (await client.info("own-client")).message_count == 1
    await client.close()


# -- forks -------------------------------------------------------------------------------------
async def test_fork_at_an_item_then_the_runner_goes_on_in_each_apart(make_session):
    s = make_session("fork-src")
    model = ScriptedModel(
        [[assistant_message("Paris")], [assistant_message("Berlin")], [assistant_message("Rome")]]
    )
    agent = Agent(name="test", model=model)
    await Runner.run(agent, "Capital of France?", session=s)
    await Runner.run(agent, "Capital of Germany?", session=s)
    held = await s.get_items()
    assert _contents(held)[0] == "Capital of France?" and len(held) == 4

    at_turn = await s.fork("fork-a", at_item=2)  # a cut between two turns: a version of its own
    assert await at_turn.get_items() == held[:2]
    inside = await s.fork("fork-b", at_item=-1)  # inside the last batch: forked, then the rest
    assert await inside.get_items() == held[:3]
    assert (await inside.client.info(inside.context_id)).forked_from == s.context_id
    whole = await s.fork("fork-c")
    assert await whole.get_items() == held
    info = await whole.client.info(whole.context_id)
    assert info.forked_from == s.context_id

    r = await Runner.run(agent, "And of Italy?", session=at_turn)
    assert r.final_output == "Rome"
    assert "Capital of Germany?" not in str(model.last_call.input)
    assert len(await at_turn.get_items()) == 4
    assert await s.get_items() == held  # the source is untouched
    with pytest.raises(Exception, match="ALREADY_EXISTS|already exists"):
        await s.fork("fork-a", at_item=1)
