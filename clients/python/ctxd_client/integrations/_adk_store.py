"""The parts of ``CtxdSessionService`` below ADK's interface: state records
in ctxd memory (merged by compare-and-set), tail reads of a session's
context as events, and the append at the version a session was read at."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session
from google.adk.sessions.state import State

from ctxd_client.aio import AsyncClient
from ctxd_client.errors import Aborted, InvalidArgument, NotFound
from ctxd_client.integrations import _adk_events as ev

#: Tries of a state merge that other writers keep changing (each round one
#: writer wins; the others wait a jittered moment and merge again).
MERGE_ATTEMPTS = 100
MERGE_BACKOFF_S = 0.002
#: Tries of an append whose version only compaction moved.
APPEND_ATTEMPTS = 4
#: A timestamp-bounded read starts at this many messages, then four times more.
FIRST_TAIL = 32
_BLOCKS = ("summary", "plan")
_STALE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


def marker(version: int, last_id: str) -> str:
    return f"{int(version)}/{last_id}"


def parse(marker: str) -> tuple[int, str]:
    version, _, last_id = marker.partition("/")
    return int(version), last_id


def merged(app: dict, user: dict, session: dict) -> dict[str, Any]:
    out = dict(session)
    out.update({State.APP_PREFIX + k: v for k, v in app.items()})
    out.update({State.USER_PREFIX + k: v for k, v in user.items()})
    return out


class Read:
    """A tail read of a session's context, as events."""

    def __init__(self, messages: list, wanted: int) -> None:
        self.version = int(messages.version)  # type: ignore[attr-defined]
        real = [m for m in messages if m.id not in _BLOCKS]
        self.last_id = real[-1].id if real else ""
        self.complete = wanted <= 0 or len(real) < wanted
        self.events = [e for e in map(ev.decode, real) if e is not None]
        summary = next((m.system.text for m in messages if m.id == "summary"), "")
        if summary and self.complete:
            end = self.events[0].timestamp - 1e-6 if self.events else time.time()
            self.events.insert(0, ev.summary_event(summary, end))


class Records:
    """A service's state records in ctxd memory: the app's, each user's,
    each session's (with its ids and creation time)."""

    def __init__(self, client: Callable[[], AsyncClient], prefix: str) -> None:
        self._client = client
        self.prefix = prefix

    @property
    def client(self) -> AsyncClient:
        return self._client()

    async def load(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads((await self.client.memory_get(key)).value_json)
        except NotFound:
            return None

    async def merge(self, key: str, delta: dict[str, Any], field: str | None = None) -> dict:
        """Merge ``delta`` into the record at ``key`` (into its ``field``),
        by compare-and-set: another writer's keys are never lost."""
        for attempt in range(MERGE_ATTEMPTS):
            try:
                record = await self.client.memory_get(key)
                value, version = json.loads(record.value_json), record.version
            except NotFound:
                if field is not None:
                    raise SessionNotFoundError(f"Session record {key} not found.") from None
                value, version = {}, ""
            target = value.setdefault(field, {}) if field else value
            target.update(delta)
            try:
                await self.client.memory_set(
                    key, value, expected_version=version, create_only=not version
                )
                return target
            except Aborted:  # another writer changed it: merge into what it is now
                await asyncio.sleep(random.random() * MERGE_BACKOFF_S * min(attempt + 1, 10))
        raise StaleSessionError(f"State record {key} kept changing; try again.")

    async def scoped(self, app_name: str, user_id: str) -> tuple[dict, dict]:
        app, user = await asyncio.gather(
            self.load(ev.app_key(self.prefix, app_name)),
            self.load(ev.user_key(self.prefix, app_name, user_id)),
        )
        return app or {}, user or {}

    async def user_states(self, app_name: str, user_id: str | None) -> dict[str, dict]:
        """User states by user id: one user's, or every user's of the app (one listing)."""
        if user_id is not None:
            return {user_id: await self.load(ev.user_key(self.prefix, app_name, user_id)) or {}}
        base = ev.user_key(self.prefix, app_name)
        listed = await self.client.memory_list(base, include_values=True, limit=1000)
        return {r.key: json.loads(r.value_json) for r in listed}

    async def store_delta(self, session: Session, delta: dict[str, Any]) -> None:
        deltas = _session_util.extract_json_safe_state_delta(delta)
        mp, app, user = self.prefix, session.app_name, session.user_id
        writes = []
        if deltas["app"]:
            writes.append(self.merge(ev.app_key(mp, app), deltas["app"]))
        if deltas["user"]:
            writes.append(self.merge(ev.user_key(mp, app, user), deltas["user"]))
        if deltas["session"]:
            key = ev.session_key(mp, app, user, session.id)
            writes.append(self.merge(key, deltas["session"], "state"))
        await asyncio.gather(*writes)


async def tail(client: AsyncClient, cid: str, config: GetSessionConfig | None) -> Read:
    """The events ``config`` asks for (all without one), by tail reads."""
    recent = config.num_recent_events if config else None
    after = config.after_timestamp if config else None
    if recent is None and after is None:
        return Read(await client.slice(cid), 0)
    wanted = max(recent or 1, 1) if after is None else max(recent or 0, FIRST_TAIL)
    while True:
        read = Read(await client.slice(cid, last_n=wanted), wanted)
        if after is None:  # an event may take several messages (parallel results)
            enough = len(read.events) >= (recent or 0)
        else:
            enough = bool(read.events) and read.events[0].timestamp < after
        if read.complete or enough:
            return read
        wanted *= 4


async def head(client: AsyncClient, cid: str) -> tuple[int, str]:
    try:
        read = Read(await client.slice(cid, last_n=1), 1)
    except NotFound:
        raise SessionNotFoundError(f"Session {cid} not found.") from None
    return read.version, read.last_id


async def append_at(client: AsyncClient, session: Session, event: Event, cid: str) -> Any:
    """AppendTurn at the version ``session`` was read at; a version only
    compaction moved (the last message is still the one it knew) is taken up."""
    if session._storage_update_marker is not None:
        version, last_id = parse(session._storage_update_marker)
    else:  # a session object this service did not read: check its last event
        try:
            top = Read(await client.slice(cid, last_n=1), 1)
        except NotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        version, last_id = top.version, top.last_id
        known = session.events[-1].id if session.events else None
        if (top.events[-1].id if top.last_id and top.events else None) != known:
            raise StaleSessionError(_STALE)
    data = ev.encode(event)
    messages = ev.project(event, data)
    for _ in range(APPEND_ATTEMPTS):
        try:
            return await client.append_turn(
                cid,
                messages,
                expected_version=version,
                idempotency_key=ev.idempotency_key(data),
            )
        except InvalidArgument:
            if len(messages) == 1 and messages[0].HasField("note"):
                raise
            messages = ev.as_note(event, data)  # e.g. a result for a call ctxd never saw
        except NotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        except Aborted:
            now, head_id = await head(client, cid)
            if head_id != last_id:
                raise StaleSessionError(_STALE) from None
            version = now  # only a compaction moved the version
    raise StaleSessionError(f"Session {session.id} kept changing; reload it.")
