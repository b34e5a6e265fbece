"""Google ADK sessions: ``CtxdSessionService`` against ADK's own ``DatabaseSessionService``.

What ADK users report slow (adk-python #3039, #4673, #4621, #4871) is what
is measured, each on both services in the same run:

* ``get_session`` with ``GetSessionConfig(num_recent_events=10)`` in a
  session of 10 and of 10,000 events (``ctxd.adk.get_session.recent10.lmdb.h<mark>``
  against ``peer.adk_database.get_session.recent10.h<mark>``): what a Runner
  asks for each turn when it is configured to load the recent events only.
* ``get_session`` without a config (a Runner's default) of a 10,000-event
  session: ADK's store loads every event
  (``peer.adk_database.get_session.all.h10000``); ctxd, after a compaction
  keeping 20, loads the summary and the kept events
  (``ctxd.adk.get_session.all.compacted.lmdb.h10000``).
* ``list_sessions`` of one user with 1,000 sessions
  (``ctxd.adk.list_sessions.lmdb.n1000`` against
  ``peer.adk_database.list_sessions.n1000``).

ctxd is a real sidecar (``bench.ctxd_server``) on LMDB with fsync, automatic
compaction off (the reads measured are the same either way; a compaction
running meanwhile would only add noise). ADK's service is
``DatabaseSessionService("sqlite+aiosqlite:///<file>")``, SQLite on a file.
Both are called as ADK calls them, awaited on one asyncio loop; the four
``get_session`` series are timed call by call in turn (one of each per
round), so the machine's load falls on all alike. Histories
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
import gc
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import Context, Result, measure, register, result_from_samples
from bench.procs import python_module_cmd, spawn

GROUP = "adk"
MARKS_FULL: tuple[int, ...] = (10, 10_000)
MARKS_QUICK: tuple[int, ...] = (10, 1_000)
RECENT = 10
#: Events a ctxd compaction keeps in the whole-session read.
KEEP_LAST = 20
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


def _interleaved(calls: dict[str, Any], n: int, warmup: int) -> dict[str, list[int]]:
    """Time every call ``n`` times, one of each in turn (so a change in the
    machine's load meanwhile falls on all series alike), after ``warmup`` rounds."""
    samples: dict[str, list[int]] = {name: [] for name in calls}
    for i in range(warmup + n):
        if i == warmup:
            gc.collect()
        for name, fn in calls.items():
            t0 = time.perf_counter_ns()
            fn()
            if i >= warmup:
                samples[name].append(time.perf_counter_ns() - t0)
    return samples


def _series(
    ctx: Context, loop: asyncio.AbstractEventLoop, services: dict[str, Any], marks: tuple[int, ...]
) -> Iterator[Result]:
    from google.adk.sessions.base_session_service import GetSessionConfig

    fills = {"ctxd": _fill_ctxd, "database": _fill_database}
    config = GetSessionConfig(num_recent_events=RECENT)
    calls: dict[str, Any] = {}
    ratio_to: dict[str, str | None] = {}
    built: dict[str, str] = {}
    for mark in marks:
        for label in ("database", "ctxd"):
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

            built[label] = sid
            peer = peer_name("get_session.recent10", f"h{mark}")
            name = peer if label == "database" else ctxd_name("get_session.recent10", f"h{mark}")
            calls[name] = get
            ratio_to[name] = None if label == "database" else peer
    n, warmup = ctx.pick(full=300, quick=20), ctx.pick(full=30, quick=3)
    for name, samples in _interleaved(calls, n, warmup).items():
        yield result_from_samples(
            samples,
            name=name,
            group=GROUP,
            ratio_to=ratio_to[name],
            extra={"recent": RECENT, "warmup": warmup, "interleaved": True},
        )
    yield from _whole(ctx, loop, services, built["database"], marks[-1])


def _whole(
    ctx: Context, loop: asyncio.AbstractEventLoop, services: dict[str, Any], db_sid: str, mark: int
) -> Iterator[Result]:
    """get_session without a config (what a Runner asks by default): ADK's
    store loads every event; ctxd, after a compaction, the summary and the
    kept events."""
    from ctxd_client.integrations import _adk_events as ev

    ctxd = services["ctxd"]
    sid = f"whole-{uuid.uuid4().hex[:6]}"
    session = loop.run_until_complete(
        ctxd.create_session(app_name=APP, user_id=USER, session_id=sid)
    )
    loop.run_until_complete(_fill_ctxd(ctxd, session, _events(mark)))
    cid = ev.session_context_id(ctxd.prefix, APP, USER, sid)

    async def compact() -> None:
        await ctxd.client.compact(cid, keep_last=KEEP_LAST)

    loop.run_until_complete(compact())
    size = f"h{mark}"
    peer = peer_name("get_session.all", size)
    mine = ctxd_name("get_session.all.compacted", size)

    def read(service: Any, session_id: str, least: int, most: int) -> Any:
        got = loop.run_until_complete(
            service.get_session(app_name=APP, user_id=USER, session_id=session_id)
        )
        if not least <= len(got.events) <= most:
            raise RuntimeError(f"{len(got.events)} events, not {least}..{most}")
        return got

    calls = {
        peer: lambda: read(services["database"], db_sid, mark, mark),
        mine: lambda: read(ctxd, sid, KEEP_LAST + 1, 2 * KEEP_LAST + 1),
    }
    n, warmup = ctx.pick(full=20, quick=5), ctx.pick(full=2, quick=1)
    for name, samples in _interleaved(calls, n, warmup).items():
        yield result_from_samples(
            samples,
            name=name,
            group=GROUP,
            ratio_to=None if name == peer else peer,
            extra={"events": mark, "keep_last": KEEP_LAST, "warmup": warmup},
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
