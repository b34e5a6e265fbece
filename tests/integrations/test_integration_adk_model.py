"""CtxdSessionService against ADK's own InMemorySessionService, as a model.

Random sequences of what a Runner and an application do (create sessions
with state, append events of every kind ADK writes with app:/user:/temp:/
session state deltas, read with and without GetSessionConfig, list by user
and by app, delete, read user state) go to both services; every answer must
be the same: the events, the merged state, the ids. On a real sidecar (LMDB).
"""

from __future__ import annotations

import random
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("google.adk")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from google.adk.events import Event, EventActions  # noqa: E402
from google.adk.sessions import InMemorySessionService  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.genai import types  # noqa: E402

from ctxd_client.integrations.adk import CtxdSessionService  # noqa: E402

APPS, USERS = ["app-a", "app b/2"], ["u1", "ü 2", "u:3"]


@pytest.fixture(scope="module")
def address(start_module_sidecar) -> str:
    return start_module_sidecar("lmdb", contexts__auto_compact=False).address


def _event(rnd: random.Random, ts: float, calls: list[str]) -> Event:
    kind = rnd.choice(["user", "model", "call", "result", "pcall", "bare"])
    delta = {}
    for _ in range(rnd.randint(0, 3)):
        scope = rnd.choice(["", "app:", "user:", "temp:"])
        delta[f"{scope}k{rnd.randint(0, 4)}"] = rnd.choice([1, "v", [1, 2], {"x": None}, 2.5])
    content = None
    if kind == "user":
        content = types.Content(role="user", parts=[types.Part(text=f"hi {rnd.random()}")])
    elif kind == "model":
        content = types.Content(role="model", parts=[types.Part(text=f"ok {rnd.random()}")])
    elif kind == "call":
        cid = f"c{len(calls)}"
        calls.append(cid)
        fc = types.FunctionCall(id=cid, name="f", args={"n": rnd.randint(0, 9)})
        content = types.Content(role="model", parts=[types.Part(function_call=fc)])
    elif kind == "pcall":  # parallel calls, then their results in one event
        ids = [f"p{len(calls)}-{k}" for k in range(3)]
        calls.append("|".join(ids))
        parts = [types.Part(function_call=types.FunctionCall(id=c, name="g", args={})) for c in ids]
        content = types.Content(role="model", parts=parts)
    elif kind == "result" and calls:
        parts = [
            types.Part(
                function_response=types.FunctionResponse(
                    id=c, name="f", response={"r": rnd.random()}
                )
            )
            for c in calls.pop().split("|")
        ]
        content = types.Content(role="user", parts=parts)
    return Event(
        author="user" if kind == "user" else "agent",
        invocation_id=f"i{rnd.randint(0, 3)}",
        timestamp=ts,
        content=content,
        actions=EventActions(state_delta=delta),
    )


def _config(rnd: random.Random, ts: float) -> GetSessionConfig | None:
    return rnd.choice(
        [
            None,
            GetSessionConfig(num_recent_events=rnd.randint(0, 6)),
            GetSessionConfig(after_timestamp=ts - rnd.randint(0, 12)),
            GetSessionConfig(num_recent_events=rnd.randint(1, 4), after_timestamp=ts - 5),
        ]
    )


def _same(a, b) -> None:
    assert (a is None) == (b is None)
    if a is not None:
        assert (a.id, a.app_name, a.user_id) == (b.id, b.app_name, b.user_id)
        assert a.state == b.state
        assert a.events == b.events


@pytest.mark.parametrize("seed", range(3))
async def test_same_answers_as_adks_in_memory_service(address, seed):
    rnd = random.Random(seed)
    tag = uuid.uuid4().hex[:8]
    ctxd = CtxdSessionService(address, prefix=f"m{tag}.", memory_prefix=f"m{tag}/")
    ref = InMemorySessionService()
    held: dict[tuple, tuple] = {}  # (app, user, id) -> (ref session, ctxd session)
    calls: list[str] = []
    ts = 1000.0
    try:
        for _ in range(120):
            op = rnd.choice(["create", "append", "append", "append", "get", "list", "delete"])
            app, user = rnd.choice(APPS), rnd.choice(USERS)
            if op == "create" or not held:
                sid = f"s{rnd.randint(0, 5)}"
                if (app, user, sid) in held:
                    continue
                state = {"n": rnd.randint(0, 9), "user:seen": True, "app:v": rnd.randint(0, 3)}
                a = await ref.create_session(
                    app_name=app, user_id=user, state=state, session_id=sid
                )
                b = await ctxd.create_session(
                    app_name=app, user_id=user, state=state, session_id=sid
                )
                _same(a, b)
                held[(app, user, sid)] = (a, b)
            elif op == "append":
                key = rnd.choice(sorted(held))
                ts += 1
                e = _event(rnd, ts, calls)
                a, b = held[key]
                await ref.append_event(a, e.model_copy(deep=True))
                await ctxd.append_event(b, e.model_copy(deep=True))
                assert a.state == b.state and a.events == b.events
            elif op == "get":
                app, user, sid = rnd.choice(sorted(held))
                config = _config(rnd, ts)
                got = [
                    await s.get_session(app_name=app, user_id=user, session_id=sid, config=config)
                    for s in (ref, ctxd)
                ]
                _same(*got)
                if config is None:  # go on with fresh copies
                    held[(app, user, sid)] = (got[0], got[1])
            elif op == "list":
                who = rnd.choice([None, user])
                listed = [
                    (await s.list_sessions(app_name=app, user_id=who)).sessions for s in (ref, ctxd)
                ]
                key = lambda s: (s.user_id, s.id)  # noqa: E731
                for a, b in zip(
                    sorted(listed[0], key=key), sorted(listed[1], key=key), strict=True
                ):
                    assert (a.user_id, a.id, a.state, a.events) == (
                        b.user_id,
                        b.id,
                        b.state,
                        b.events,
                    )
                for s in (ref, ctxd):
                    assert await s.get_user_state(app_name=app, user_id=user) == (
                        await ref.get_user_state(app_name=app, user_id=user)
                    )
            else:
                app, user, sid = rnd.choice(sorted(held))
                for s in (ref, ctxd):
                    await s.delete_session(app_name=app, user_id=user, session_id=sid)
                del held[(app, user, sid)]
    finally:
        await ctxd.close()
