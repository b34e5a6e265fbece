"""Google ADK sessions: ``CtxdSessionService`` against ADK's own ``DatabaseSessionService``.

What ADK users report slow (adk-python #3039, #4673, #4621, #4871) is what
is measured, each on both services in the same run:

* ``get_session`` with ``GetSessionConfig(num_recent_events=10)`` in a
  session of 10 and of 10,000 events (``ctxd.adk.get_session.recent10.lmdb.h<mark>``
  against ``peer.adk_database.get_session.recent10.h<mark>``): what a Runner
  asks for each turn when it is configured to load the recent events only.
* ``list_sessions`` of one user with 1,000 sessions
  (``ctxd.adk.list_sessions.lmdb.n1000`` against
  ``peer.adk_database.list_sessions.n1000``).

ctxd is a real sidecar (``bench.ctxd_server``) on LMDB with fsync, automatic
compaction off (the reads measured are the same either way; a compaction
running meanwhile would only add noise). ADK's service is
``DatabaseSessionService("sqlite+aiosqlite:///<file>")``, SQLite on a file.
Both are called as ADK calls them, awaited on one asyncio loop. Histories
are built in bulk in each service's own storage form: ctxd's through
AppendTurn batches of the messages ``append_event`` writes, ADK's through
its own ``StorageEvent`` rows in one transaction (its ``append_event`` writes
the same row, one transaction each). Sessions for the listing are made with
each service's ``create_session``.

Without google-adk (``pip install -e '.[adk]'``) or SQLAlchemy the suite
records a skip.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import Context, Result, measure, register
from bench.procs import python_module_cmd, spawn

GROUP = "adk"
MARKS_FULL: tuple[int, ...] = (10, 10_000)
MARKS_QUICK: tuple[int, ...] = (10, 1_000)
RECENT = 10
BATCH = 200
APP, USER = "bench-app", "bench-user"
INSTALL_HINT = "pip install -e '.[adk]' 'sqlalchemy[asyncio]'"


def ctxd_name(what: str, size: str) -> str:
    return f"ctxd.adk.{what}.lmdb.{size}"


def peer_name(what: str, size: str) -> str:
    return f"peer.adk_database.{what}.{size}"


def _events(n: int) -> list[Any]:
    from google.adk.events import Event
    from google.genai import types

    text = "context durable sidecar turn memory agent store plan " * 8
    out = []
    for i in range(n):
        role, author = ("user", "user") if i % 2 == 0 else ("model", "assistant")
        out.append(
            Event(
                author=author,
                invocation_id=f"inv-{i // 2}",
                timestamp=1_700_000_000 + i,
                content=types.Content(role=role, parts=[types.Part(text=f"{i} {text}")]),
            )
        )
    return out


async def _fill_ctxd(service: Any, session: Any, events: list[Any]) -> None:
    from ctxd_client.integrations import _adk_events as ev

    cid = ev.session_context_id(service.prefix, session.app_name, session.user_id, session.id)
    for at in range(0, len(events), BATCH):
        batch = [m for e in events[at : at + BATCH] for m in ev.project(e, ev.encode(e))]
        await service.client.append_turn(cid, batch)


async def _fill_database(service: Any, session: Any, events: list[Any]) -> None:
    schema = service._get_schema_classes()
    async with service._rollback_on_exception_session() as sql:
        sql.add_all([schema.StorageEvent.from_event(session, e) for e in events])
        await sql.commit()


def _series(
    ctx: Context, loop: asyncio.AbstractEventLoop, services: dict[str, Any], marks: tuple[int, ...]
) -> Iterator[Result]:
    from google.adk.sessions.base_session_service import GetSessionConfig

    fills = {"ctxd": _fill_ctxd, "database": _fill_database}
    config = GetSessionConfig(num_recent_events=RECENT)
    n = ctx.pick(full=200, quick=20)
    for mark in marks:
        for label in ("database", "ctxd"):  # the baseline first: ratio_to names it
            service = services[label]
            sid = f"h{mark}-{uuid.uuid4().hex[:6]}"
            session = loop.run_until_complete(
                service.create_session(app_name=APP, user_id=USER, session_id=sid)
            )
            loop.run_until_complete(fills[label](service, session, _events(mark)))

            def get(service=service, sid=sid, mark=mark, label=label) -> Any:
                got = loop.run_until_complete(
                    service.get_session(app_name=APP, user_id=USER, session_id=sid, config=config)
                )
                if len(got.events) != min(RECENT, mark):
                    raise RuntimeError(f"{label}: {len(got.events)} events, not {RECENT}")
                return got

            name = peer_name("get_session.recent10", f"h{mark}")
            if label == "ctxd":
                name = ctxd_name("get_session.recent10", f"h{mark}")
            yield measure(
                get,
                n,
                name=name,
                group=GROUP,
                ratio_to=None
                if label == "database"
                else peer_name("get_session.recent10", f"h{mark}"),
                extra={"events": mark, "recent": RECENT},
            )


def _listing(
    ctx: Context, loop: asyncio.AbstractEventLoop, services: dict[str, Any]
) -> Iterator[Result]:
    count = ctx.pick(full=1_000, quick=100)
    size = f"n{count}"
    n = ctx.pick(full=30, quick=5)
    for label in ("database", "ctxd"):
        service = services[label]
        user = f"lister-{uuid.uuid4().hex[:6]}"

        async def make(service=service, user=user) -> None:
            for i in range(count):
                await service.create_session(
                    app_name=APP, user_id=user, session_id=f"s{i:05}", state={"i": i}
                )

        loop.run_until_complete(make())

        def listed(service=service, user=user, label=label) -> Any:
            got = loop.run_until_complete(service.list_sessions(app_name=APP, user_id=user))
            if len(got.sessions) != count:
                raise RuntimeError(f"{label}: listed {len(got.sessions)}, not {count}")
            return got

        yield measure(
            listed,
            n,
            warmup=2,
            name=peer_name("list_sessions", size)
            if label == "database"
            else ctxd_name("list_sessions", size),
            group=GROUP,
            ratio_to=None if label == "database" else peer_name("list_sessions", size),
            extra={"sessions": count},
        )


@register(GROUP)
def adk_sessions(ctx: Context) -> Iterator[Result]:
    try:
        import sqlalchemy  # noqa: F401
        from google.adk.sessions import DatabaseSessionService
    except ImportError as exc:
        ctx.skip("ctxd.adk", f"{exc.name or exc} not installed ({INSTALL_HINT})")
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python"))
    from ctxd_client.integrations.adk import CtxdSessionService

    data = ctx.tmpdir(prefix="bench-adk-ctxd-")
    sqlite_file = os.path.join(ctx.tmpdir(prefix="bench-adk-sqlite-"), "sessions.db")
    cmd = python_module_cmd(
        "bench.ctxd_server",
        "--store",
        f"lmdb://{data}?map_size=4GiB",
        "--set",
        "contexts.auto_compact=false",
        "--set",
        "memory.max_keys=100000000",
    )
    loop = asyncio.new_event_loop()
    with spawn(cmd) as (_, port):
        services = {
            "ctxd": CtxdSessionService(f"127.0.0.1:{int(port)}"),
            "database": DatabaseSessionService(f"sqlite+aiosqlite:///{sqlite_file}"),
        }
        try:
            marks = ctx.pick(full=MARKS_FULL, quick=MARKS_QUICK)
            yield from _series(ctx, loop, services, marks)
            yield from _listing(ctx, loop, services)
        finally:
            loop.run_until_complete(services["ctxd"].close())
            loop.run_until_complete(services["database"].close())
            loop.close()
