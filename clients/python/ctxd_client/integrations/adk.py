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
import time
import uuid
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events import Event
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session

from ctxd_client.aio import AsyncClient
from ctxd_client.errors import NotFound
from ctxd_client.integrations import _adk_events as ev
from ctxd_client.integrations import _adk_store as st
from ctxd_client.integrations._loop_clients import LoopClients


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
        self._clients = LoopClients(client)
        self._records = st.Records(lambda: self.client, memory_prefix)

    @property
    def client(self) -> AsyncClient:
        return self._clients.get()

    async def close(self) -> None:
        """Close the clients the service opened (a client passed in stays open)."""
        await self._clients.close()

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
        try:
            await self.client.memory_set(key, record)
        except BaseException:
            await self.client.delete(cid)  # no context left without its record
            raise
        app, user = await asyncio.gather(
            self._records.merge(ev.app_key(self.memory_prefix, app_name), deltas["app"]),
            self._records.merge(ev.user_key(self.memory_prefix, app_name, user_id), deltas["user"]),
        )
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=st.merged(app, user, deltas["session"]),
            last_update_time=now,
        )
        session._storage_update_marker = st.marker(created.info.version, "")
        return session

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
                st.tail(self.client, cid, config),
                self._records.load(key),
                self._records.scoped(app_name, user_id),
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
            state=st.merged(app, user, record.get("state") or {}),
            events=events,
            last_update_time=last,
        )
        session._storage_update_marker = st.marker(read.version, read.last_id)
        return session

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
            self._records.load(ev.app_key(mp, app_name)),
            self._records.user_states(app_name, user_id),
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
                    state=st.merged(app or {}, user, rec.get("state") or {}),
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
        return await self._records.load(ev.user_key(self.memory_prefix, app_name, user_id)) or {}

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        cid = ev.session_context_id(self.prefix, session.app_name, session.user_id, session.id)
        reply = await st.append_at(self.client, session, event, cid)
        last_id = reply.message_ids[-1] if reply.message_ids else ""
        session._storage_update_marker = st.marker(reply.version, last_id)
        if not reply.replayed and event.actions and event.actions.state_delta:
            await self._records.store_delta(session, event.actions.state_delta)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)


__all__ = ["CtxdSessionService"]
