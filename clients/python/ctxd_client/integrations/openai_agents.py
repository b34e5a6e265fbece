"""An OpenAI Agents SDK session kept by ctxd: ``CtxdSession``.

``pip install 'ctxd-client[agents]'``, then::

    from ctxd_client import AsyncClient
    from ctxd_client.integrations.openai_agents import CtxdSession

    session = CtxdSession("user-42", client=AsyncClient("127.0.0.1:50051"))
    result = await Runner.run(agent, "Hello", session=session)

The SDK's items are Responses API input items; ctxd stores them in its
Responses format (``MESSAGE_FORMAT_OPENAI_RESPONSES``), so every item comes
back exactly as added (equal as JSON, in order): reasoning items with
``encrypted_content``, function calls and outputs, images, hosted-tool and
MCP items, item ids. What the SDK asks of a session maps onto one call each:

* ``add_items`` is one AppendTurn: the batch is atomic, and a retry of the
  call (a lost reply) appends nothing twice (idempotency key per batch).
* ``get_items(limit=N)`` is a tail read of N messages (fewer when the N
  would start inside a tool round: a provider refuses an output without its
  call); ``get_items()``
  reads incrementally after the first time (only what changed).
* ``pop_item`` is one TruncateContext: atomic, even against other writers.
  When a compaction left only its summary, popping returns the summary and
  deletes the conversation (conditional on its version), so ``pop_item``
  and ``get_items`` always agree on the most recent item.
* ``clear_session`` deletes the conversation.
* ``run_compaction`` (the SDK calls it after each turn) compacts through
  ctxd when the conversation passed its threshold, or always with
  ``force``: the sidecar's summariser, or your own model through
  ``summarise`` (PlanCompaction, then ApplyCompaction). The summary is a
  structured, readable block, not an encrypted blob, and the folded items
  stay retrievable with ``ExpandCompaction``.

After a compaction ``get_items()`` returns the summary as one system item,
``{"role": "system", "content": "..."}``, followed by the kept items
exactly as added: what the model needs next, not the whole stored history.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agents.memory.session import SessionABC
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from ctxd_client.aio import AsyncClient
from ctxd_client.errors import Aborted, NotFound
from ctxd_client.integrations._compaction import acompact
from ctxd_client.integrations._fork import fork_at_item
from ctxd_client.integrations._ids import context_id
from ctxd_client.integrations._loop_clients import LoopClients

FORMAT = "openai_responses"

#: Tries of a pop that other writers keep changing the session under.
POP_ATTEMPTS = 3

#: ``summarise(system_prompt, excerpt, answer_schema_json) -> answer``: the
#: agent's own model writing the summary (JSON matching the schema, or text).
Summarise = Callable[[str, str, str], Awaitable[str]]


def _kind(item: Any) -> str:
    return str(item.get("type", "message")) if isinstance(item, dict) else ""


def _inside_step(before: Any, head: Any, kept: list[Any]) -> bool:
    """Whether a list starting at ``head`` (``before`` cut off) would start
    inside a tool round: an output whose call is cut off, an item the model
    produced right after a reasoning item, or a parallel call after the first."""
    kind = _kind(head)
    if kind.endswith("_output") and "call_id" in head:
        return not any(
            i.get("call_id") == head["call_id"] and not _kind(i).endswith("_output")
            for i in kept
            if isinstance(i, dict)
        )
    if isinstance(head, dict) and head.get("role") in ("user", "system", "developer"):
        return False
    return _kind(before) == "reasoning" or (kind == _kind(before) == "function_call")


def _tail(items: list[Any], limit: int) -> list[Any]:
    """The last ``limit`` items (the SDK's protocol), never starting inside a
    tool round: the provider refuses an output without its call or a call
    without its reasoning item, so such a head is left out (fewer items)."""
    cut = max(0, len(items) - limit)
    while 0 < cut < len(items) and _inside_step(items[cut - 1], items[cut], items[cut:]):
        cut += 1
    return items[cut:]


class CtxdSession(SessionABC):
    """The SDK's ``Session`` (and compaction-aware session) over ctxd."""

    def __init__(
        self,
        session_id: str,
        client: AsyncClient | str,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        prefix: str = "",
        model: str = "",
        model_window: int = 0,
        keep_last: int = 0,
        summariser: str = "",
        summarise: Summarise | None = None,
    ) -> None:
        """``session_id`` may be any text: it is encoded into a context id
        under ``prefix`` (list one app's sessions with
        ``client.list_contexts(id_prefix=prefix)``). ``model`` or
        ``model_window`` set the window compaction is measured against;
        ``keep_last`` the items a compaction keeps (0: the sidecar's
        setting); ``summariser`` names a sidecar summariser plugin, or
        ``summarise`` lets the agent's own model write the summary.

        ``client`` is an :class:`AsyncClient` (used on its own event loop),
        or the sidecar's address: then the session opens a client per event
        loop it is used on (``Runner.run_sync`` runs its own loop)."""
        self.session_id = session_id
        self.prefix = prefix
        self.context_id = context_id(session_id, prefix)
        self._client = client
        self._clients = LoopClients(client)
        self.session_settings = coerce_session_settings(session_settings or SessionSettings())
        self.model = model
        self.model_window = model_window
        self.keep_last = keep_last
        self.summariser = summariser
        self.summarise = summarise
        self._held: list[Any] | None = None
        self._version: int | None = None
        self._due = False

    @property
    def client(self) -> AsyncClient:
        return self._clients.get()

    # -- the Session protocol ---------------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The latest ``limit`` items in order (all when None; the session
        settings' limit when not given), fewer when the last ``limit`` would
        start inside a tool round."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        try:
            if limit is not None:
                # One more than asked shows what comes before the cut.
                items = await self.client.slice(self.context_id, format=FORMAT, last_n=limit + 1)
                return _tail(list(items), limit)
            return list(await self._whole())
        except NotFound:
            self._held = self._version = None
            return []

    async def _whole(self) -> list[Any]:
        """The whole slice, read incrementally against the copy held."""
        if self._held is not None and self._version is not None:
            delta = await self.client.slice(
                self.context_id, format=FORMAT, since_version=self._version
            )
            if delta.change == "append":
                self._held.extend(delta.messages)
            elif delta.change == "replace":
                self._held = list(delta.messages)
            self._version = delta.version
            return list(self._held)
        items = await self.client.slice(self.context_id, format=FORMAT)
        self._held, self._version = list(items), items.version
        return list(items)

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` as one atomic, replay-safe turn."""
        if not items:
            return
        reply = await self.client.append_turn(
            self.context_id,
            list(items),
            format=FORMAT,
            model=self.model,
            model_window=self.model_window,
        )
        self._due = self._due or bool(reply.compaction_due)

    async def pop_item(self) -> Any | None:
        """Remove and return the last item ``get_items`` shows (None when
        there is none), atomically. After a compaction the kept items go
        first; then the summary, the only item left: popping it empties the
        session (as ``clear_session``: the folded items go with it)."""
        for _ in range(POP_ATTEMPTS):
            try:
                out = await self.client.truncate(self.context_id, count=1, format=FORMAT)
                if out.removed:
                    return out.removed[-1]
                left = await self.client.slice(self.context_id, format=FORMAT)
                if not left:
                    return None
                # Only the summary is left: remove it unless a turn came in meanwhile.
                if not await self.client.delete(self.context_id, expected_version=left.version):
                    return None  # cleared meanwhile
            except NotFound:
                return None
            except Aborted:
                continue  # another writer changed the session: pop from what it is now
            self._held = self._version = None
            return left[-1]
        return None

    async def clear_session(self) -> None:
        """Delete the conversation (its summary and archived items too)."""
        self._held = self._version = None
        self._due = False
        await self.client.delete(self.context_id)

    # -- history ------------------------------------------------------------------------------
    async def fork(self, new_session_id: str, *, at_item: int | None = None) -> CtxdSession:
        """A new session holding this one's items as ``get_items()`` shows
        them, up to ``at_item`` (``items[:at_item]``: None keeps every item, a
        negative index counts from the end), independent afterwards. It
        shares this session's stored history (ForkContext); the client,
        prefix and compaction settings are this session's. A session id
        already used: ``AlreadyExists``."""
        new = CtxdSession(
            new_session_id,
            self._client,
            session_settings=self.session_settings,
            prefix=self.prefix,
            model=self.model,
            model_window=self.model_window,
            keep_last=self.keep_last,
            summariser=self.summariser,
            summarise=self.summarise,
        )
        if at_item is None:
            await self.client.fork(self.context_id, new.context_id)
            return new
        items = list(await self.client.slice(self.context_id, format=FORMAT))
        turn = {"model": self.model, "model_window": self.model_window}
        await fork_at_item(self.client, self.context_id, new.context_id, items, at_item, **turn)
        return new

    # -- compaction --------------------------------------------------------------------------
    async def run_compaction(self, args: dict[str, Any] | None = None) -> None:
        """Compact when the last turn passed the threshold, or with
        ``{"force": True}``; ``response_id``, ``store`` and ``compaction_mode``
        are the Responses API's own compaction settings and do not apply.
        A compaction that another one (the sidecar's automatic one) beat to
        these messages is done, not an error."""
        force = bool((args or {}).get("force"))
        if not (force or self._due):
            return
        self._due = False
        own = self.summarise
        await acompact(
            self.client,
            self.context_id,
            keep_last=self.keep_last,
            summariser=self.summariser,
            summarise=None
            if own is None
            else lambda plan: own(plan.system_prompt, plan.excerpt, plan.answer_schema_json),
        )

    async def close(self) -> None:
        """Close the clients the session opened (a client passed in stays open)."""
        await self._clients.close()


__all__ = ["CtxdSession", "Summarise"]
