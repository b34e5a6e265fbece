"""A Google ADK session service kept by ctxd: ``CtxdSessionService``.

``pip install 'ctxd-client[adk]'``, then::

    from ctxd_client.integrations.adk import CtxdSessionService

    sessions = CtxdSessionService("127.0.0.1:50051")
    runner = Runner(agent=agent, app_name="shop", session_service=sessions)

What ADK's ``BaseSessionService`` asks, over ctxd:

* Each session's events are a ctxd context (id ``adk.<app>:<user>:<session>``),
  one AppendTurn per event, each event kept exactly as ADK's JSON beside a
  form ctxd understands (user turn, model text and tool calls, tool
  results, note), so ctxd's compaction folds old events into a summary and
  ``get_session`` loads the summary (as ADK's own compaction event,
  ``actions.compaction``) and the kept events, not the whole history.
* ``GetSessionConfig``: ``num_recent_events`` and ``after_timestamp`` are
  tail reads (``last_n``), never the whole history.
* State in ctxd memory: the session's own keys in its session record, the
  ``user:`` and ``app:`` keys in one record per user and per app, merged by
  compare-and-set (concurrent writers lose no key); ``temp:`` keys are
  never stored, as in ADK's own services.
* Two runners on one session: each append names the version its session
  object was read at; a runner whose copy is stale (another appended
  meanwhile) gets ADK's ``StaleSessionError`` and nothing is stored, so
  invocations never interleave and no event is lost silently. A version
  moved only by ctxd's compaction is not staleness: the append goes on.
* ``list_sessions``: two paged listings (session records with their state,
  contexts by id prefix), not a call per session.

An event and its state change are two writes: a crash between them keeps
the event (its ``state_delta`` included) without the state change.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from typing import Any

from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
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


def _marker(version: int, last_id: str) -> str:
    return f"{int(version)}/{last_id}"


def _parse(marker: str) -> tuple[int, str]:
    version, _, last_id = marker.partition("/")
    return int(version), last_id


def _merged(app: dict, user: dict, session: dict) -> dict[str, Any]:
    out = dict(session)
    out.update({State.APP_PREFIX + k: v for k, v in app.items()})
    out.update({State.USER_PREFIX + k: v for k, v in user.items()})
    return out


class _Read:
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


class CtxdSessionService(BaseSessionService):
    """ADK's ``BaseSessionService`` over a ctxd sidecar."""

    def __init__(
        self, client: AsyncClient | str, *, prefix: str = "adk.", memory_prefix: str = ""
    ) -> None:
        """``client``: an :class:`AsyncClient` (used on its own event loop),
        or the sidecar's address (a client is opened per event loop).
        ``prefix`` starts every session's context id (at most 16 characters
        of the context id alphabet); ``memory_prefix`` every memory key."""
        if len(prefix) > 16:
            raise ValueError("prefix: at most 16 characters")
        self.prefix = prefix
        self.memory_prefix = memory_prefix
        self._client = client
        self._clients: dict[int, AsyncClient] = {}

    @property
    def client(self) -> AsyncClient:
        if isinstance(self._client, AsyncClient):
            return self._client
        loop = asyncio.get_running_loop()
        found = self._clients.get(id(loop))
        if found is None:
            found = self._clients[id(loop)] = AsyncClient(self._client)
        return found

    async def close(self) -> None:
        """Close the clients the service opened (a client passed in stays open)."""
        clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            try:
                await c.close()
            except RuntimeError:  # its event loop is gone
                pass

    # -- records ----------------------------------------------------------------------------
    async def _load(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads((await self.client.memory_get(key)).value_json)
        except NotFound:
            return None

    async def _merge(self, key: str, delta: dict[str, Any], field: str | None = None) -> dict:
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

    async def _scoped(self, app_name: str, user_id: str) -> tuple[dict, dict]:
        app, user = await asyncio.gather(
            self._load(ev.app_key(self.memory_prefix, app_name)),
            self._load(ev.user_key(self.memory_prefix, app_name, user_id)),
        )
        return app or {}, user or {}

    # -- BaseSessionService ---------------------------------------------------------------------
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        session_id = (session_id or "").strip() or uuid.uuid4().hex
        cid = ev.session_context_id(self.prefix, app_name, user_id, session_id)
        created = await self.client.create_context(cid, principal=user_id, task=app_name)
        if not created.created:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.")
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        now = time.time()
        record = {
            "app_name": app_name,
            "user_id": user_id,
            "id": session_id,
            "context_id": cid,
            "created": now,
            "state": deltas["session"],
        }
        key = ev.session_key(self.memory_prefix, app_name, user_id, session_id)
        await self.client.memory_set(key, record)
        app, user = await asyncio.gather(
            self._merge(ev.app_key(self.memory_prefix, app_name), deltas["app"]),
            self._merge(ev.user_key(self.memory_prefix, app_name, user_id), deltas["user"]),
        )
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged(app, user, deltas["session"]),
            last_update_time=now,
        )
        session._storage_update_marker = _marker(created.info.version, "")
        return session

    async def _tail(self, cid: str, config: GetSessionConfig | None) -> _Read:
        """The events ``config`` asks for (all without one), by tail reads."""
        recent = config.num_recent_events if config else None
        after = config.after_timestamp if config else None
        if recent is None and after is None:
            return _Read(await self.client.slice(cid), 0)
        wanted = max(recent or 1, 1) if after is None else max(recent or 0, FIRST_TAIL)
        while True:
            read = _Read(await self.client.slice(cid, last_n=wanted), wanted)
            early = after is None or (read.events and read.events[0].timestamp < after)
            if read.complete or early:
                return read
            wanted *= 4

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        session_id = session_id.strip() if session_id else session_id
        cid = ev.session_context_id(self.prefix, app_name, user_id, session_id)
        key = ev.session_key(self.memory_prefix, app_name, user_id, session_id)
        try:
            read, record, (app, user) = await asyncio.gather(
                self._tail(cid, config), self._load(key), self._scoped(app_name, user_id)
            )
        except NotFound:
            return None
        if record is None:
            return None
        events = read.events
        if config and config.after_timestamp is not None:
            events = [e for e in events if e.timestamp >= config.after_timestamp]
        if config and config.num_recent_events is not None:
            events = events[-config.num_recent_events :] if config.num_recent_events else []
        last = read.events[-1].timestamp if read.events and read.last_id else record["created"]
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged(app, user, record.get("state") or {}),
            events=events,
            last_update_time=last,
        )
        session._storage_update_marker = _marker(read.version, read.last_id)
        return session

    async def _user_states(self, app_name: str, user_id: str | None) -> dict[str, dict]:
        """User states by user id: one user's, or every user's of the app (one listing)."""
        if user_id is not None:
            return {
                user_id: await self._load(ev.user_key(self.memory_prefix, app_name, user_id)) or {}
            }
        base = ev.user_key(self.memory_prefix, app_name)
        listed = await self.client.memory_list(base, include_values=True, limit=1000)
        return {r.key: json.loads(r.value_json) for r in listed}

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        mp = self.memory_prefix
        records, infos, app, users = await asyncio.gather(
            self.client.memory_list(
                ev.session_key(mp, app_name, user_id), include_values=True, limit=1000
            ),
            self.client.list_contexts(
                id_prefix=ev.context_prefix(self.prefix, app_name, user_id),
                include_archived=True,
                page_size=1000,
            ),
            self._load(ev.app_key(mp, app_name)),
            self._user_states(app_name, user_id),
        )
        by_id = {i.id: i for i in infos}
        out = []
        for r in records:
            rec = json.loads(r.value_json)
            info = by_id.get(rec["context_id"])
            if info is None:
                continue  # its context is gone (deleted meanwhile)
            uid = rec["user_id"]
            user = users.get(uid if user_id is not None else ev.user_key(mp, app_name, uid), {})
            updated = info.updated_ms / 1000 if info.turns else rec["created"]
            out.append(
                Session(
                    id=rec["id"],
                    app_name=app_name,
                    user_id=uid,
                    state=_merged(app or {}, user, rec.get("state") or {}),
                    last_update_time=max(updated, rec["created"]),
                )
            )
        out.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=out)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        session_id = session_id.strip() if session_id else session_id
        cid = ev.session_context_id(self.prefix, app_name, user_id, session_id)
        await self.client.memory_delete(
            ev.session_key(self.memory_prefix, app_name, user_id, session_id)
        )
        await self.client.delete(cid)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await self._load(ev.user_key(self.memory_prefix, app_name, user_id)) or {}

    # -- appending ------------------------------------------------------------------------------
    async def _head(self, cid: str) -> tuple[int, str]:
        try:
            read = _Read(await self.client.slice(cid, last_n=1), 1)
        except NotFound:
            raise SessionNotFoundError(f"Session {cid} not found.") from None
        return read.version, read.last_id

    async def _append(self, session: Session, event: Event, cid: str) -> Any:
        """AppendTurn at the version ``session`` was read at; a version only
        compaction moved (the last message is still the one it knew) is taken up."""
        if session._storage_update_marker is not None:
            version, last_id = _parse(session._storage_update_marker)
        else:  # a session object this service did not read: check its last event
            try:
                head = _Read(await self.client.slice(cid, last_n=1), 1)
            except NotFound:
                raise SessionNotFoundError(f"Session {session.id} not found.") from None
            version, last_id = head.version, head.last_id
            known = session.events[-1].id if session.events else None
            if (head.events[-1].id if head.last_id and head.events else None) != known:
                raise StaleSessionError(_STALE)
        data = ev.encode(event)
        messages = ev.project(event, data)
        for _ in range(APPEND_ATTEMPTS):
            try:
                return await self.client.append_turn(
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
                now, head_id = await self._head(cid)
                if head_id != last_id:
                    raise StaleSessionError(_STALE) from None
                version = now  # only a compaction moved the version
        raise StaleSessionError(f"Session {session.id} kept changing; reload it.")

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        cid = ev.session_context_id(self.prefix, session.app_name, session.user_id, session.id)
        reply = await self._append(session, event, cid)
        last_id = reply.message_ids[-1] if reply.message_ids else ""
        session._storage_update_marker = _marker(reply.version, last_id)
        if not reply.replayed and event.actions and event.actions.state_delta:
            await self._store_delta(session, event.actions.state_delta)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    async def _store_delta(self, session: Session, delta: dict[str, Any]) -> None:
        deltas = _session_util.extract_json_safe_state_delta(delta)
        mp, app, user = self.memory_prefix, session.app_name, session.user_id
        writes = []
        if deltas["app"]:
            writes.append(self._merge(ev.app_key(mp, app), deltas["app"]))
        if deltas["user"]:
            writes.append(self._merge(ev.user_key(mp, app, user), deltas["user"]))
        if deltas["session"]:
            key = ev.session_key(mp, app, user, session.id)
            writes.append(self._merge(key, deltas["session"], "state"))
        await asyncio.gather(*writes)


__all__ = ["CtxdSessionService"]
