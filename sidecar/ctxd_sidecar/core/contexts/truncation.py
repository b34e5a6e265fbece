"""TruncateContext and CreateContext: the edits a framework's session needs.

A session's ``pop_item`` (the OpenAI Agents SDK rewinds a turn with it
before a retry) must remove the last item atomically and hand it back.
Truncation is one ``truncate`` log record (:mod:`.ops`) committed through
:meth:`ContextService.change`, so it is serialised with turns, compactions
and other replicas like every change, and ``expected_version`` makes it
conditional. Only live messages can go (folded ones are in the summary);
their ids are never reused. What the caller answers with (the removed
messages converted) is made before the commit: an answer that cannot be
made fails the call with nothing removed, never after the removal.

Creating an empty conversation (a session listed before its first item)
is a turn without messages, committed by :class:`~.turns.Turns` with
``expected_version=0``: it exists at version 1, or already did.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctxd_sidecar.core.compaction.view import binds_next
from ctxd_sidecar.core.contexts import validate
from ctxd_sidecar.core.contexts.model import ContextInfo, ContextState, Msg
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.contexts.turns import TurnRequest, Turns
from ctxd_sidecar.core.errors import Conflict, FailedPrecondition, InvalidArgument

#: Most messages one truncation removes.
MAX_TRUNCATE = 10_000
_MESSAGE_ID = re.compile(r"^m([1-9][0-9]{0,17})$")


@dataclass(frozen=True, slots=True)
class Truncated:
    version: int
    removed: list[Msg]
    incarnation: str
    #: ``render(removed)``, made before the commit (None when nothing was removed).
    rendered: Any = None


class TranscriptEdits:
    """Truncation and creation over a :class:`ContextService`."""

    def __init__(self, contexts: ContextService, turns: Turns) -> None:
        self.contexts = contexts
        self.turns = turns

    async def truncate(
        self,
        context_id: str,
        *,
        count: int = 0,
        after_message_id: str = "",
        expected_version: int | None = None,
        render: Callable[[list[Msg]], Any] | None = None,
    ) -> Truncated:
        """Remove the last ``count`` live messages, or every live message
        after ``after_message_id`` (and a reasoning item the cut would leave
        without the message it goes with); return them, oldest first, with
        ``render(them)`` (run before the commit: if it raises, nothing is
        removed)."""
        if count and after_message_id:
            raise InvalidArgument("after_message_id", "set either count or after_message_id")
        if not count and not after_message_id:
            raise InvalidArgument("count", "say how many trailing messages to remove (1 or more)")
        if count and not 1 <= count <= MAX_TRUNCATE:
            raise InvalidArgument("count", f"must be between 1 and {MAX_TRUNCATE}")
        after_seq = 0
        if after_message_id:
            found = _MESSAGE_ID.fullmatch(after_message_id)
            if found is None:
                raise InvalidArgument("after_message_id", "must be a message id such as m12")
            after_seq = int(found.group(1))
        removed: list[Msg] = []
        rendered: list[Any] = [None]

        def build(st: ContextState) -> dict | None:
            removed.clear()
            rendered[0] = None
            msgs = st.messages
            if count:
                keep = max(0, len(msgs) - count)
            else:
                keep = next((i + 1 for i, m in enumerate(msgs) if m.seq == after_seq), -1)
                if keep < 0:
                    raise FailedPrecondition(
                        f"after_message_id {after_message_id} names no live message of "
                        f"context {st.id} (folded into the summary, removed, or never there)"
                    )
            # No cut falls right after a Responses reasoning item: it goes
            # with the message after it (the API refuses it alone).
            while 0 < keep < len(msgs) and binds_next(msgs[keep - 1]):
                keep -= 1
            if keep >= len(msgs):
                return None
            removed.extend(msgs[keep:])
            if render is not None:
                rendered[0] = render(list(removed))
            return {"op": "truncate", "from": msgs[keep].seq}

        st, rec = await self.contexts.change(
            context_id, build, expected_version=expected_version, event="truncate"
        )
        if rec is None:
            return Truncated(st.version, [], st.gen)
        return Truncated(st.version, list(removed), st.gen, rendered[0])

    async def create(
        self,
        context_id: str,
        *,
        principal: str = "",
        model: str = "",
        model_window: int = 0,
        task: str = "",
    ) -> tuple[bool, ContextInfo]:
        """Make an empty conversation exist: (created now, its info)."""
        cid = validate.context_id(context_id)
        if validate.is_root(cid):
            return False, (await self.contexts.get(cid)).info()
        req = TurnRequest(
            context_id=cid,
            messages=[],
            expected_version=0,
            principal=principal,
            model=model,
            model_window=model_window,
            task=task,
            create=True,
        )
        try:
            await self.turns.append(req)
            created = True
        except Conflict:
            created = False  # it exists (at a version past 0)
        return created, (await self.contexts.get(cid)).info()
