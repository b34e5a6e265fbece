"""The one commit protocol of a context.

Every change of a context commits here — turns, plan, skills, compaction,
deletion, expiry, import — so a rule about versions or replicas is one edit::

    async with contexts.transaction(cid, expected_version=ev, missing=Missing.CREATE) as tx:
        while await tx.next():
            st = tx.state          # locked, loaded, caught up, version checked
            ...                    # decide (an idempotent replay returns here)
            if await tx.commit(record, event="turn", built=built):
                return result      # durable and applied
            # lost the race: refreshed and backed off; decide again

:meth:`Transaction.next` holds what every change needs before it decides:
the context's lock, an idempotency key already taken (the change is then a
replay, before any version check), its state loaded (and confirmed against the store on a
shared store, see :meth:`ContextService.load`), a deleted copy re-read once
(another replica may have created the id again), ``expected_version``
checked against the store rather than this replica's copy, and the
``missing`` rule. :meth:`Transaction.commit` makes a new context durable
(its head) on first use, writes the record with a create-only put of the
next version (the serialisation point for every writer sharing the store),
applies it, and announces it; after a lost race it catches up, backs off
and lets the caller decide again. After :data:`COMMIT_ATTEMPTS` the change
answers UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import enum
import random
from collections.abc import Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from ctxd_sidecar.core.contexts.model import ContextState, Msg
from ctxd_sidecar.core.contexts.persistence import not_found
from ctxd_sidecar.core.contexts.registry import Entry
from ctxd_sidecar.core.errors import Conflict, Unavailable

#: Commit attempts when another writer keeps taking the next version.
COMMIT_ATTEMPTS = 8


class Keeper(Protocol):
    """What a transaction needs of the record keeper
    (:class:`~ctxd_sidecar.core.contexts.service.ContextService`)."""

    shared: bool

    def now(self) -> int: ...
    async def load(self, e: Entry) -> ContextState | None: ...
    async def refresh(self, e: Entry, *, lost_race: bool = False) -> None: ...
    def new_state(self, cid: str, replacing: ContextState | None = None) -> ContextState: ...
    async def create(self, st: ContextState) -> None: ...
    async def write(
        self, e: Entry, st: ContextState, rec: dict[str, Any], built: Sequence[Msg] | None
    ) -> None: ...
    def after_commit(
        self, e: Entry, st: ContextState, kind: str, detail: dict[str, Any]
    ) -> None: ...
    def forget(self, e: Entry) -> None: ...


class Missing(enum.Enum):
    """What a change does when the context does not exist (or was deleted)."""

    #: Answer NOT_FOUND.
    NOT_FOUND = "not_found"
    #: Start it (a deleted id's next turn starts a new conversation).
    CREATE = "create"
    #: Stop without a state: :meth:`Transaction.next` returns False.
    ABSENT = "absent"


class Transaction:
    """One change of one context, under its lock (see the module docstring)."""

    def __init__(
        self,
        contexts: Keeper,
        entry: Entry,
        *,
        expected_version: int | None,
        missing: Missing,
        idempotency_key: str = "",
        attempts: int = COMMIT_ATTEMPTS,
    ) -> None:
        self._svc = contexts
        self._e = entry
        self._expected = expected_version
        self._missing = missing
        self._key = idempotency_key
        self._attempts = attempts
        self._attempt = -1
        self._caught_up = False
        self._reloaded = False
        #: The state of the current attempt (the live object).
        self.state: ContextState | None = None
        #: The first result of this change's idempotency key, when the
        #: context already took it (replay it; nothing is committed).
        self.replayed: dict[str, Any] | None = None
        #: The record last committed.
        self.record: dict[str, Any] | None = None

    async def next(self) -> bool:
        """Ready the next attempt: False when the context is missing and the
        rule is :attr:`Missing.ABSENT`; Unavailable once attempts run out."""
        svc, e = self._svc, self._e
        while True:
            self._attempt += 1
            if self._attempt >= self._attempts:
                raise Unavailable(f"context {e.id} is being written elsewhere; retry")
            st = await svc.load(e)
            if st is None or not st.exists:
                if st is not None and st.deleted and svc.shared and not self._reloaded:
                    # Our copy says deleted; another replica may have created
                    # the id again since.
                    self._reloaded = e.stale = True
                    continue
                if self._missing is Missing.ABSENT:
                    self.state = None
                    return False
                if self._missing is Missing.NOT_FOUND:
                    raise not_found(e.id)
                if st is None or st.deleted:
                    st = e.state = svc.new_state(e.id, replacing=st)
                # else: a head at version 0 with no record is reused
            if self._key and self._key in st.idem:
                # A retry of a change already made: whatever the version now.
                self.state, self.replayed = st, st.idem[self._key]
                return True
            ev = self._expected
            if ev is not None and ev != st.version:
                if not self._caught_up and st.head_etag is not None:
                    # The store decides, not this replica's copy.
                    self._caught_up = True
                    await svc.refresh(e)
                    continue
                raise stale_version(e.id, st.version, ev)
            self.state = st
            return True

    async def commit(
        self,
        body: dict[str, Any],
        *,
        event: str = "change",
        built: Sequence[Msg] | None = None,
        detail: dict[str, Any] | None = None,
        backoff: bool = True,
    ) -> bool:
        """Commit ``body`` (``{"op": ..., ...}``; ``v`` filled in, ``ts``
        unless given) as the next version; True once durable and applied.
        False after a lost race: decide again on the refreshed state.

        ``built`` are the record's messages as objects (an append), applied
        as they are instead of decoded again; ``detail`` is what the event
        carries (by default the record). ``backoff=False``: retry at once
        after a lost race (a fence, which should win over steady writers)."""
        svc, e, st = self._svc, self._e, self.state
        assert st is not None, "commit() before next()"
        if st.head_etag is None:
            try:
                await svc.create(st)
            except Conflict:
                e.stale = True  # created elsewhere meanwhile
                return False
        rec = {"ts": svc.now(), **body, "v": st.version + 1}
        if st.calibration.kept and "cal" not in rec:
            rec["cal"] = st.calibration.to_dict()
        try:
            await svc.write(e, st, rec, built)
        except Conflict:
            await svc.refresh(e, lost_race=True)
            if backoff:
                await race_backoff(self._attempt)
            return False
        self.record = rec
        if event:
            svc.after_commit(e, st, event, rec if detail is None else detail)
        return True

    @asynccontextmanager
    async def exclusive(self):
        """Hold off checkpoints of this context (a deletion's fence and head removal)."""
        async with self._e.ckpt_lock:
            yield

    def forget(self) -> None:
        """The context left this replica's memory (deleted or archived)."""
        self._svc.forget(self._e)


async def race_backoff(attempt: int) -> None:
    """After losing a write race to another sidecar, wait a random moment
    (growing with each loss) so racing writers stop colliding in lockstep."""
    await asyncio.sleep(random.uniform(0, min(0.1, 0.005 * 2**attempt)))


def stale_version(cid: str, actual: int, expected: int) -> Conflict:
    return Conflict(
        f"context {cid} is at version {actual}, not the expected {expected}; re-read and retry"
    )
