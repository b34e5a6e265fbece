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
segments, the fence last, then the trash record. On a shared store that
purge waits ``contexts.fence_hold`` seconds (a replica restores any copy it
has not confirmed for half that time): until then every version of the
deleted incarnation stays taken, so a replica however far behind meets the
fence (see :meth:`Deletion._purge`). A deletion interrupted by a crash is finished at the
next start; one whose fence was never written is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ctxd_sidecar.core import faults
from ctxd_sidecar.core.contexts import lineage, validate
from ctxd_sidecar.core.contexts.janitor import Job
from ctxd_sidecar.core.contexts.model import ROOT_ID
from ctxd_sidecar.core.contexts.persistence import (
    TRASH,
    decode,
    head_key,
    log_key,
    trash_name,
)
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.contexts.transaction import Missing, Transaction
from ctxd_sidecar.core.errors import (
    Conflict,
    CtxdError,
    FailedPrecondition,
    InvalidArgument,
)
from ctxd_sidecar.core.jsonvalue import encode_compact

log = logging.getLogger(__name__)

#: Fence attempts while other replicas keep appending: each is one probe and
#: one write, with no back-off (the fence should win, not take turns).
FENCE_ATTEMPTS = 128


class Deletion:
    """Deleting conversations over a :class:`ContextService`."""

    def __init__(self, contexts: ContextService) -> None:
        self.contexts = contexts
        self._timers: set[asyncio.Task] = set()
        self._stopped = False

    async def start(self) -> None:
        # Before serving: a deletion a crash cut short must not show the
        # context again (its head may still be there).
        await self.resume()

    def stop(self) -> None:
        """Fence removals still waiting are redone at the next start (their
        trash records stay), including those of purges the janitor finishes
        while the service stops."""
        self._stopped = True
        for t in self._timers:
            t.cancel()

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
            pending: dict[str, Any] | None = None  # the trash record written for this incarnation
            try:
                while await tx.next():
                    st = tx.state
                    if st.head_etag is None:  # never made durable here: nothing stored
                        tx.forget()
                        return False
                    if pending is not None and pending["gen"] != st.gen:
                        await self._drop_trash(pending)
                        pending = None
                    if pending is None:
                        pending = await self._write_trash(tx)
                    if await self._fence(tx, pending):
                        pending = None
                        self.contexts.emit("deleted", None, cid, st.version)
                        return True
            finally:
                if pending is not None:
                    # Not deleted: the trash record must not finish it later.
                    await self._drop_trash(pending)
        # Unknown (perhaps only seen by a refused first turn): the same answer
        # whatever the expected_version.
        return False

    async def fence(self, tx: Transaction) -> bool:
        """Fence and remove the transaction's context (expiry). False when
        another writer took the next version first (``tx`` has caught up;
        decide again)."""
        plan = await self._write_trash(tx)
        if await self._fence(tx, plan):
            return True
        await self._drop_trash(plan)
        return False

    async def _write_trash(self, tx: Transaction) -> dict[str, Any]:
        """The trash record of the transaction's incarnation, written before
        its fence so a crash between them is finished at the next start. It
        names the version the fence will follow at the earliest (``base``);
        the fence's own version is known once it is written."""
        svc, st = self.contexts, tx.state
        plan = {
            "id": st.id,
            "gen": st.gen,
            "base": st.version,
            "segments": [
                s.to_list() for s in st.segments + st.dropped + [a for a, _ in st.archive + st.held]
            ],
        }
        name = trash_name(st.id, st.gen)
        await svc.trash.add(name)
        await svc.storage.put(f"{TRASH}/{name}", encode_compact(plan))
        faults.crash_point("contexts.after_trash_record")
        return plan

    async def _drop_trash(self, plan: dict[str, Any]) -> None:
        svc = self.contexts
        name = trash_name(plan["id"], plan["gen"])
        await svc.storage.delete(f"{TRASH}/{name}")
        await svc.trash.remove(name)

    async def _fence(self, tx: Transaction, plan: dict[str, Any]) -> bool:
        """Write the fence right after the catch-up (nothing in between, so a
        steady writer on another replica cannot keep taking its version),
        then remove the head and schedule the purge."""
        svc, st = self.contexts, tx.state
        async with tx.exclusive():
            fenced_at = svc.now()
            if not await tx.commit({"op": "deleted", "ts": fenced_at}, event="", backoff=False):
                return False
            faults.crash_point("contexts.after_fence")
            plan.update(last=st.version, fence=st.version, fenced_at=fenced_at)
            plan["segments"] = await self._remove_head(st.id, st.gen, plan["segments"])
            name = trash_name(st.id, st.gen)
            await svc.storage.put(f"{TRASH}/{name}", encode_compact(plan))
            tx.forget()
        faults.crash_point("contexts.after_head_delete")
        self._purge(name, plan)
        return True

    async def _remove_head(self, cid: str, gen: str, segments: list[list[int]]) -> list:
        """Remove the head if it still names ``gen``; return every segment it or
        the plan names. A head another incarnation wrote meanwhile stays."""
        svc = self.contexts
        head = await svc.store.read_head(cid)
        if head is None or head[0].get("gen") != gen:
            return segments
        doc, etag = head
        named = {tuple(s) for s in segments}
        archived = [a[:4] for a in list(doc.get("archive", ())) + list(doc.get("held", ()))]
        for s in list(doc.get("segments", ())) + list(doc.get("dropped", ())) + archived:
            if tuple(s) not in named:
                segments.append(list(s))
                named.add(tuple(s))
        try:
            await svc.storage.delete(head_key(cid), if_version=etag)
        except Conflict:
            return segments  # replaced by a new incarnation: it keeps its index entry
        await svc.index.remove(cid)
        if await svc.store.read_head(cid) is not None:
            await svc.index.add(cid)  # a new incarnation was created meanwhile
        return segments

    def _purge(self, name: str, plan: dict[str, Any]) -> None:
        """Remove a deleted incarnation's keys in the background, once its
        fence has been held long enough (at once on a store no other sidecar
        shares).

        Every log record stays as long as the fence: a replica whose copy is
        any number of versions behind (confirmed less than half the hold
        ago, else it restores from the head) then always finds its next
        record taken, catches up through it and meets the fence, on a read
        and on a write alike. Removing the records first would free their
        versions: the replica would take its copy as current, serve the
        deleted transcript and acknowledge appends into the dead incarnation."""
        svc = self.contexts
        cid, gen = plan["id"], plan["gen"]
        fence = plan.get("fence")
        fence_key = log_key(cid, gen, int(fence)) if fence else None

        async def prepare():
            keys = await lineage.purge_keys(svc.store, cid, gen, plan)
            return [lambda k=k: svc.storage.delete(k) for k in keys if k != fence_key]

        async def finish():
            # The fence goes last: until then no version of the incarnation is free.
            if fence_key is not None:
                await svc.storage.delete(fence_key)
            await svc.storage.delete(f"{TRASH}/{name}")
            await svc.trash.remove(name)

        job = Job(f"purge {cid}", prepare, finish)
        due = int(plan.get("fenced_at", 0)) / 1000 + svc.fence_hold
        wait = max(0.0, due - svc.now() / 1000) if fence_key is not None else 0.0
        if wait <= 0:
            svc.janitor.submit(job)
            return
        if self._stopped:
            return  # the next start's resume() purges it
        timer = asyncio.create_task(self._later(wait, job))
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)

    async def _later(self, wait: float, job: Job) -> None:
        await asyncio.sleep(wait)
        self.contexts.janitor.submit(job)

    async def resume(self) -> None:
        """Finish deletions a crash interrupted (their trash records remain)."""
        svc = self.contexts
        try:
            for name, item in await svc.trash.scan(""):
                plan = decode(item.value, f"trash record {name}")
                if not await self._fenced(plan):
                    # Crashed before the fence: the context was never deleted.
                    await svc.storage.delete(f"{TRASH}/{name}")
                    await svc.trash.remove(name)
                    continue
                plan["segments"] = await self._remove_head(
                    plan["id"], plan["gen"], list(plan.get("segments", ()))
                )
                self._purge(name, plan)
        except CtxdError as exc:
            log.warning("could not resume context deletions", extra={"error": str(exc)})

    async def _fenced(self, plan: dict[str, Any]) -> bool:
        """Whether the plan's fence was written (or its incarnation is gone
        anyway); a plan written before its fence learns the fence's version."""
        svc = self.contexts
        cid, gen = plan["id"], plan["gen"]
        if "fence" in plan:
            item = await svc.storage.get(log_key(cid, gen, int(plan["fence"])))
            if item is not None:
                return decode(item.value, "fence record").get("op") == "deleted"
        else:
            v = int(plan.get("base", 0)) + 1
            while (item := await svc.storage.get(log_key(cid, gen, v))) is not None:
                if decode(item.value, f"log record {v}").get("op") == "deleted":
                    plan.update(last=v, fence=v)
                    plan.setdefault("fenced_at", svc.now())
                    return True
                v += 1
            plan.setdefault("last", v - 1)
        head = await svc.store.read_head(cid)
        return head is None or head[0].get("gen") != gen
