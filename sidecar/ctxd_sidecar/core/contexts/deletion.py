"""DeleteContext: a fenced deletion that no replica can race.

A deletion is committed like any other change: by the create-only write of
the next log record, here a ``deleted`` record (the *fence*). That write is
where it is serialised against every other writer sharing the store:

* ``expected_version`` is checked against the store: if another replica took
  the next version first, the deleting replica catches up and compares again
  (ABORTED when the context moved on);
* after the fence is written no replica can acknowledge an append to the
  deleted incarnation: its next version is taken, so an append there fails,
  catches up, meets the fence and **starts a new conversation** under the
  same id (a new incarnation, with only what it acknowledges from then on).
  A read meets the fence too and answers NOT_FOUND.

In order: a trash record naming what to remove is written first, then the
fence, then the head is removed (if it still belongs to this incarnation),
then the id leaves the index, and the janitor removes the log records and
segments, the fence last, then the trash record. That layout and its purge
are :mod:`.trash`'s: on a shared store the purge waits
``contexts.fence_hold`` seconds (a replica restores any copy it has not
confirmed for half that time), so a replica however far behind meets the
fence (see :meth:`.trash.Trash.purge`). A deletion interrupted by a crash
is finished at the next start; one whose fence was never written is dropped.
"""

from __future__ import annotations

from ctxd_sidecar.core import faults
from ctxd_sidecar.core.contexts import validate
from ctxd_sidecar.core.contexts.model import ROOT_ID
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.contexts.transaction import Missing, Transaction
from ctxd_sidecar.core.contexts.trash import Plan
from ctxd_sidecar.core.errors import FailedPrecondition, InvalidArgument

#: Fence attempts while other replicas keep appending: each is one probe and
#: one write, with no back-off (the fence should win, not take turns).
FENCE_ATTEMPTS = 128


class Deletion:
    """Deleting conversations over a :class:`ContextService`."""

    def __init__(self, contexts: ContextService) -> None:
        self.contexts = contexts
        self.trash = contexts.trash

    async def start(self) -> None:
        # Before serving: a deletion a crash cut short must not show the
        # context again (its head may still be there).
        await self.trash.resume()

    def stop(self) -> None:
        """Fence removals still waiting are redone at the next start (their
        trash records stay), including those of purges the janitor finishes
        while the service stops."""
        self.trash.stop()

    async def delete(self, context_id: str, expected_version: int | None = None) -> bool:
        """Delete a conversation and everything stored for it; False if it did not exist."""
        cid = validate.context_id(context_id)
        if cid == ROOT_ID:
            raise FailedPrecondition("the root context cannot be deleted")
        if expected_version is not None and expected_version < 0:
            raise InvalidArgument("expected_version", "must not be negative")
        async with self.contexts.transaction(
            cid,
            expected_version=expected_version,
            missing=Missing.ABSENT,
            attempts=FENCE_ATTEMPTS,
        ) as tx:
            pending: Plan | None = None  # the trash record written for this incarnation
            try:
                while await tx.next():
                    st = tx.state
                    if st.head_etag is None:  # never made durable here: nothing stored
                        tx.forget()
                        return False
                    if pending is not None and pending["gen"] != st.gen:
                        await self.trash.drop(pending)
                        pending = None
                    if pending is None:
                        pending = await self.trash.record(st)
                    if await self._fence(tx, pending):
                        pending = None
                        self.contexts.emit("deleted", None, cid, st.version)
                        return True
            finally:
                if pending is not None:
                    # Not deleted: the trash record must not finish it later.
                    await self.trash.drop(pending)
        # Unknown (perhaps only seen by a refused first turn): the same answer
        # whatever the expected_version.
        return False

    async def fence(self, tx: Transaction) -> bool:
        """Fence and remove the transaction's context (expiry). False when
        another writer took the next version first (``tx`` has caught up;
        decide again)."""
        plan = await self.trash.record(tx.state)
        if await self._fence(tx, plan):
            return True
        await self.trash.drop(plan)
        return False

    async def _fence(self, tx: Transaction, plan: Plan) -> bool:
        """Write the fence right after the catch-up (nothing in between, so a
        steady writer on another replica cannot keep taking its version),
        then remove the head and schedule the purge."""
        async with tx.exclusive():
            fenced_at = self.contexts.now()
            if not await tx.commit({"op": "deleted", "ts": fenced_at}, event="", backoff=False):
                return False
            faults.crash_point("contexts.after_fence")
            name = await self.trash.after_fence(tx.state, plan, fenced_at)
            tx.forget()
        faults.crash_point("contexts.after_head_delete")
        self.trash.purge(name, plan)
        return True
