"""CtxdSessionService under ADK's own Runner, on a real sidecar.

An ``LlmAgent`` with a function tool, its model ADK's OpenAI-compatible
class talking chat completions to a real HTTP server on loopback
(:mod:`tests.integrations.adk_support`), its sessions in ctxd (LMDB; S3 and
PostgreSQL in the slow set): turns
with a tool call see the history, events come back exactly as ADK wrote
them while ctxd stores the tool call and result as its own kinds, state
goes to its app/user/session scopes (temp never stored), and after a ctxd
compaction the next turn's request carries the summary, not the folded
events. Then what issue reports say ADK's stores get wrong: two runners on
one session, a long history read by a tail, many sessions listed at once.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("google.adk")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.errors import StaleSessionError  # noqa: E402
from google.adk.events import Event, EventActions  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.adk.tools.tool_context import ToolContext  # noqa: E402
from google.genai import types  # noqa: E402

from ctxd_client import AsyncClient  # noqa: E402
from ctxd_client.integrations.adk import CtxdSessionService  # noqa: E402
from tests.integrations.adk_support import ToolCallingOpenAI, call, model, say  # noqa: E402

APP = "weather-app"


#: LMDB in the default run; S3 (moto) and PostgreSQL in the slow set.
STORES = [
    "lmdb",
    pytest.param("s3", marks=pytest.mark.slow),
    pytest.param("postgres", marks=pytest.mark.slow),
]


@pytest.fixture(scope="module", params=STORES)
def address(start_module_sidecar, request) -> str:
    store = request.param
    if store == "postgres":
        pg = request.getfixturevalue("pg_server")
        store = lambda _dir: pg.fresh_store_uri()  # noqa: E731
    return start_module_sidecar(store, contexts__auto_compact=False).address


@pytest.fixture
async def service(address):
    tag = uuid.uuid4().hex[:8]
    s = CtxdSessionService(address, prefix=f"a{tag}.", memory_prefix=f"a{tag}/")
    yield s
    await s.close()


@pytest.fixture
def llm():
    with ToolCallingOpenAI() as server:
        yield server


def get_weather(city: str, tool_context: ToolContext) -> dict:
    """The weather in a city."""
    tool_context.state["user:last_city"] = city
    tool_context.state["temp:scratch"] = "not stored"
    tool_context.state["lookups"] = tool_context.state.get("lookups", 0) + 1
    return {"city": city, "weather": "sunny"}


def user(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def run(runner: Runner, session_id: str, text: str, user_id: str = "u1") -> list[Event]:
    return [
        e
        async for e in runner.run_async(
            user_id=user_id, session_id=session_id, new_message=user(text)
        )
    ]


def agent(llm) -> LlmAgent:
    return LlmAgent(name="weather", model=model(llm), instruction="Answer.", tools=[get_weather])


async def test_runner_turns_with_a_tool(service, llm, address):
    llm.replies.extend(
        [call("get_weather", "call-1", city="Paris"), say("Sunny in Paris."), say("Still sunny.")]
    )
    runner = Runner(agent=agent(llm), app_name=APP, session_service=service)
    s = await service.create_session(app_name=APP, user_id="u1", state={"app:units": "C"})
    first = await run(runner, s.id, "Weather in Paris?")
    assert [bool(e.get_function_calls()) for e in first] == [True, False, False]
    assert first[-1].content.parts[0].text == "Sunny in Paris."
    second = await run(runner, s.id, "And tomorrow?")
    assert second[-1].content.parts[0].text == "Still sunny."
    # The second request carried the first turn: the question, the call and its result.
    sent = llm.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[2]["tool_calls"][0]["id"] == "call-1" and sent[3]["tool_call_id"] == "call-1"

    got = await service.get_session(app_name=APP, user_id="u1", session_id=s.id)
    # Every event as the Runner wrote it: the user's, the call, the result, the answers.
    assert [e.model_dump() for e in got.events[1:4]] == [e.model_dump() for e in first]
    assert [e.author for e in got.events] == ["user"] + ["weather"] * 3 + ["user", "weather"]
    assert got.state["user:last_city"] == "Paris" and got.state["lookups"] == 1
    assert got.state["app:units"] == "C" and "temp:scratch" not in got.state
    assert await service.get_user_state(app_name=APP, user_id="u1") == {"last_city": "Paris"}
    # ctxd holds the tool round as its own kinds (what compaction reads).
    async with AsyncClient(address) as c:
        cid = service_context(service, s.id)
        kinds = [m.WhichOneof("kind") for m in (await c.get(cid)).context.messages]
    assert kinds == ["user", "assistant", "tool", "assistant", "user", "assistant"]


def service_context(service: CtxdSessionService, session_id: str, user_id: str = "u1") -> str:
    from ctxd_client.integrations._adk_events import session_context_id

    return session_context_id(service.prefix, APP, user_id, session_id)


async def test_after_compaction_the_request_carries_the_summary(service, llm, address):
    runner = Runner(agent=agent(llm), app_name=APP, session_service=service)
    s = await service.create_session(app_name=APP, user_id="u1")
    for i in range(8):
        llm.replies.append(say(f"answer {i}"))
        await run(runner, s.id, f"question {i} about the migration")
    async with AsyncClient(address) as c:
        await c.compact(service_context(service, s.id), keep_last=4)
        summary = [m for m in await c.slice(service_context(service, s.id)) if m.id == "summary"]
    got = await service.get_session(app_name=APP, user_id="u1", session_id=s.id)
    # ctxd's summary in ADK's own compaction form, then the kept events: not 16 events.
    assert got.events[0].actions.compaction is not None
    assert (
        got.events[0].actions.compaction.compacted_content.parts[0].text == summary[0].system.text
    )
    assert [e.content.parts[0].text for e in got.events[1:]] == [
        "question 6 about the migration",
        "answer 6",
        "question 7 about the migration",
        "answer 7",
    ]
    llm.replies.append(say("done"))
    await run(runner, s.id, "one more")
    sent = llm.requests[-1].body["messages"][1:]
    assert sent[0] == {"role": "assistant", "content": summary[0].system.text}
    assert "question 0 about the migration" in sent[0]["content"]  # folded into the summary
    assert [m["content"] for m in sent[1:]] == [
        "question 6 about the migration",
        "answer 6",
        "question 7 about the migration",
        "answer 7",
        "one more",
    ]


async def test_two_runners_on_one_session_never_interleave(service, llm):
    llm.replies.extend([say("a"), say("b"), say("c"), say("d")])
    s = await service.create_session(app_name=APP, user_id="u1")
    runners = [Runner(agent=agent(llm), app_name=APP, session_service=service) for _ in range(2)]
    results = await asyncio.gather(
        *(run(r, s.id, f"from runner {i}") for i, r in enumerate(runners)), return_exceptions=True
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(e, StaleSessionError) for e in errors), errors
    done = [r for r in results if not isinstance(r, BaseException)]
    assert done
    got = await service.get_session(app_name=APP, user_id="u1", session_id=s.id)
    # Invocations whole and in order: each one's events contiguous, none lost.
    runs = [e.invocation_id for e in got.events]
    blocks = [k for i, k in enumerate(runs) if i == 0 or runs[i - 1] != k]
    assert len(blocks) == len(set(blocks))
    stored = {e.id for e in got.events}
    assert all(e.id in stored for r in done for e in r)


async def test_concurrent_writers_lose_no_event_and_no_state(service):
    s = await service.create_session(app_name=APP, user_id="u1")
    writers, each = 4, 6

    async def writer(w: int) -> None:
        for i in range(each):
            while True:
                mine = await service.get_session(
                    app_name=APP,
                    user_id="u1",
                    session_id=s.id,
                    config=GetSessionConfig(num_recent_events=1),
                )
                e = Event(
                    author="user",
                    invocation_id=f"w{w}",
                    content=user(f"w{w} #{i}"),
                    actions=EventActions(state_delta={f"w{w}": i, f"user:w{w}": i, "temp:t": 1}),
                )
                try:
                    await service.append_event(mine, e)
                    break
                except StaleSessionError:
                    await asyncio.sleep(0)

    await asyncio.gather(*(writer(w) for w in range(writers)))
    got = await service.get_session(app_name=APP, user_id="u1", session_id=s.id)
    texts = [e.content.parts[0].text for e in got.events]
    assert len(texts) == writers * each
    for w in range(writers):
        assert [t for t in texts if t.startswith(f"w{w} ")] == [f"w{w} #{i}" for i in range(each)]
        assert got.state[f"w{w}"] == each - 1 and got.state[f"user:w{w}"] == each - 1
    assert "temp:t" not in got.state


async def test_a_long_history_is_read_by_its_tail(service):
    s = await service.create_session(app_name=APP, user_id="u1")
    for i in range(300):
        await service.append_event(
            s, Event(author="user", timestamp=1000 + i, content=user(f"m{i}"))
        )
    recent = await service.get_session(
        app_name=APP, user_id="u1", session_id=s.id, config=GetSessionConfig(num_recent_events=10)
    )
    assert [e.timestamp for e in recent.events] == [1290 + i for i in range(10)]
    after = await service.get_session(
        app_name=APP, user_id="u1", session_id=s.id, config=GetSessionConfig(after_timestamp=1250)
    )
    assert [e.timestamp for e in after.events] == [1250 + i for i in range(50)]
    none = await service.get_session(
        app_name=APP, user_id="u1", session_id=s.id, config=GetSessionConfig(num_recent_events=0)
    )
    assert none.events == [] and none.last_update_time == 1299
    # The tail's session appends where the whole one would: no stale error.
    await service.append_event(recent, Event(author="user", timestamp=2000, content=user("next")))


async def test_list_sessions_by_user_and_app(service, request):
    # Fewer on S3 (moto): its listings are slow enough that a loaded machine times out.
    each = 10 if request.node.callspec.params["address"] == "s3" else 40
    for u in range(3):
        for i in range(each):
            await service.create_session(
                app_name=APP, user_id=f"user {u}/x", session_id=f"s{i:03}", state={"n": i}
            )
    await service.create_session(app_name="other-app", user_id="user 0/x", session_id="s000")
    s = await service.get_session(app_name=APP, user_id="user 1/x", session_id="s007")
    await service.append_event(
        s, Event(author="user", content=user("hi"), actions=EventActions(state_delta={"user:k": 1}))
    )
    one = (await service.list_sessions(app_name=APP, user_id="user 1/x")).sessions
    assert len(one) == each and one[-1].id == "s007"  # the most recently active last
    assert {x.user_id for x in one} == {"user 1/x"} and all(x.events == [] for x in one)
    assert all(x.state["user:k"] == 1 for x in one)
    assert sorted(x.state["n"] for x in one) == list(range(each))
    every = (await service.list_sessions(app_name=APP)).sessions
    assert len(every) == 3 * each
    assert {x.user_id for x in every if x.state.get("user:k")} == {"user 1/x"}
    await service.delete_session(app_name=APP, user_id="user 2/x", session_id="s001")
    assert len((await service.list_sessions(app_name=APP)).sessions) == 3 * each - 1


async def test_parallel_tool_results_and_odd_events_round_trip(service):
    s = await service.create_session(app_name=APP, user_id="u1")
    calls = Event(
        author="weather",
        content=types.Content(
            role="model",
            parts=[
                types.Part(function_call=types.FunctionCall(id="c1", name="f", args={"a": 1})),
                types.Part(function_call=types.FunctionCall(id="c2", name="g", args={})),
            ],
        ),
    )
    results = Event(
        author="weather",
        content=types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(id="c1", name="f", response={"x": 1})
                ),
                types.Part(
                    function_response=types.FunctionResponse(id="c2", name="g", response={"y": 2})
                ),
            ],
        ),
    )
    orphan = Event(  # a result for a call ctxd never saw: stored as a note
        author="user",
        content=types.Content(
            role="user",
            parts=[
                types.Part(function_response=types.FunctionResponse(id="zz", name="h", response={}))
            ],
        ),
    )
    bare = Event(author="weather", actions=EventActions(escalate=True, state_delta={"k": "v"}))
    for e in (calls, results, orphan, bare):
        await service.append_event(s, e)
    got = await service.get_session(app_name=APP, user_id="u1", session_id=s.id)
    assert got.events == [calls, results, orphan, bare]
    assert got == s


async def test_errors_as_adk_raises_them(service):
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError

    s = await service.create_session(app_name=APP, user_id="u1", session_id="dup")
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=APP, user_id="u1", session_id="dup")
    await service.delete_session(app_name=APP, user_id="u1", session_id="dup")
    await service.delete_session(app_name=APP, user_id="u1", session_id="dup")  # again: no error
    assert await service.get_session(app_name=APP, user_id="u1", session_id="dup") is None
    with pytest.raises(SessionNotFoundError):
        await service.append_event(s, Event(author="user", content=user("late")))


async def test_user_and_app_state_from_many_sessions_at_once_lose_no_key(service):
    sessions = [
        await service.create_session(app_name=APP, user_id="u1", session_id=f"p{i}")
        for i in range(24)
    ]
    await asyncio.gather(
        *(
            service.append_event(
                s,
                Event(
                    author="user",
                    content=user("hi"),
                    actions=EventActions(state_delta={f"user:k{i}": i, f"app:k{i}": i}),
                ),
            )
            for i, s in enumerate(sessions)
        )
    )
    assert await service.get_user_state(app_name=APP, user_id="u1") == {
        f"k{i}": i for i in range(24)
    }
    fresh = await service.create_session(app_name=APP, user_id="u2")
    assert {k: v for k, v in fresh.state.items() if k.startswith("app:")} == {
        f"app:k{i}": i for i in range(24)
    }


def test_the_docs_program_runs_as_printed(address, tmp_path):
    """docs/integrations/adk.md's program, run as printed (only the sidecar's
    address swapped for this test's)."""
    import os
    import re
    import subprocess

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "integrations" / "adk.md").read_text()
    program = re.findall(r"```python\n(.*?)```", page, re.S)[0]
    assert "127.0.0.1:50051" in program
    script = tmp_path / "adk_demo.py"
    script.write_text(program.replace("127.0.0.1:50051", address))
    env = {**os.environ, "PYTHONPATH": str(root / "clients" / "python")}
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "assistant: Hello Ada, noted.",
        "assistant: Your name is Ada.",
        "4 events kept by ctxd",
    ]


async def test_a_version_moved_by_compaction_is_not_staleness(service, address):
    s = await service.create_session(app_name=APP, user_id="u1")
    for i in range(12):
        await service.append_event(s, Event(author="user", content=user(f"turn {i} " * 20)))
    async with AsyncClient(address) as c:
        await c.compact(service_context(service, s.id), keep_last=4)
    # The session object predates the compaction; nothing else was appended.
    await service.append_event(s, Event(author="user", content=user("after")))
    got = await service.get_session(app_name=APP, user_id="u1", session_id=s.id)
    assert got.events[-1].content.parts[0].text == "after"
    assert got.events[0].actions.compaction is not None


async def test_runner_under_ctxds_automatic_compaction(start_sidecar, tmp_path, llm):
    """The sidecar compacts on its own between a runner's appends (a small
    window): every turn still goes through, and the session stays bounded."""
    running = start_sidecar(
        f"lmdb://{tmp_path / 'auto'}?map_size=64MiB",
        contexts__default_model_window=3000,
        contexts__keep_last=4,
    )
    service = CtxdSessionService(running.address)
    try:
        runner = Runner(agent=agent(llm), app_name=APP, session_service=service)
        s = await service.create_session(app_name=APP, user_id="u1")
        for i in range(12):
            llm.replies.extend([call("get_weather", f"c{i}", city=f"city {i}"), say(f"done {i}")])
            events = await run(runner, s.id, f"turn {i}: " + "details of the migration " * 30)
            assert events[-1].content.parts[0].text == f"done {i}"
        got = await service.get_session(app_name=APP, user_id="u1", session_id=s.id)
        assert got.events[0].actions.compaction is not None  # compacted on its own
        assert len(got.events) < 4 * 12
        assert got.events[-1].content.parts[0].text == "done 11"
        assert got.state["lookups"] == 12
    finally:
        await service.close()


async def test_a_session_past_the_memory_cap_leaves_nothing_behind(start_sidecar, tmp_path):
    from ctxd_client.errors import ResourceExhausted

    running = start_sidecar(f"lmdb://{tmp_path / 'cap'}?map_size=64MiB", memory__max_keys=3)
    service = CtxdSessionService(running.address)
    try:
        # The app and user records and one session record fill the cap.
        await service.create_session(
            app_name=APP, user_id="u1", session_id="a", state={"app:x": 1, "user:y": 2}
        )
        with pytest.raises(ResourceExhausted, match="max_keys"):
            await service.create_session(app_name=APP, user_id="u1", session_id="b")
        assert await service.get_session(app_name=APP, user_id="u1", session_id="b") is None
        listed = (await service.list_sessions(app_name=APP, user_id="u1")).sessions
        assert [x.id for x in listed] == ["a"]
        async with AsyncClient(running.address) as c:
            assert [i.id for i in await c.list_contexts(id_prefix="adk.")] == [
                service_context(service, "a")
            ]
    finally:
        await service.close()


async def test_recent_events_count_events_not_messages(service):
    """An event of parallel tool results is several ctxd messages; the most
    recent N are still N events."""
    s = await service.create_session(app_name=APP, user_id="u1")
    for i in range(4):
        ids = [f"r{i}-{k}" for k in range(3)]
        calls = [types.Part(function_call=types.FunctionCall(id=c, name="f", args={})) for c in ids]
        results = [
            types.Part(function_response=types.FunctionResponse(id=c, name="f", response={}))
            for c in ids
        ]
        await service.append_event(
            s, Event(author="a", content=types.Content(role="model", parts=calls))
        )
        await service.append_event(
            s, Event(author="a", content=types.Content(role="user", parts=results))
        )
    got = await service.get_session(
        app_name=APP, user_id="u1", session_id=s.id, config=GetSessionConfig(num_recent_events=5)
    )
    assert got.events == s.events[-5:]
