"""The deletion layout: trash records, the head's removal and the purge.

A deletion (:mod:`.deletion`) commits a fence like any other change; what
it leaves behind is this module's. ``context-trash/<id>~<gen>`` names what
to remove of one deleted incarnation (its segments, the version its fence
follows, when the fence was written):

1. :meth:`Trash.record` writes it before the fence, so a crash between
   the two is finished (or dropped) at the next start;
2. :meth:`Trash.after_fence` removes the head if it still names the
   incarnation, takes the id off the index and writes the record again with
   the fence's version;
3. :meth:`Trash.purge` has the janitor remove the log records and segments,
   the fence last, then the trash record. On a shared store it waits
   ``contexts.fence_hold`` seconds first: until then every version of the
   deleted incarnation stays taken, so a replica however far behind meets
   the fence.

:meth:`Trash.resume` finishes at start what a crash interrupted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ctxd_sidecar.core import faults
from ctxd_sidecar.core.contexts import lineage
from ctxd_sidecar.core.contexts.janitor import Janitor, Job
from ctxd_sidecar.core.contexts.model import ContextState
from ctxd_sidecar.core.contexts.persistence import (
    TRASH,
    ContextStore,
    decode,
    head_key,
    log_key,
    trash_name,
)
from ctxd_sidecar.core.errors import Conflict, CtxdError
from ctxd_sidecar.core.jsonvalue import encode_compact
from ctxd_sidecar.core.keyindex import KeyIndex
from ctxd_sidecar.core.storage import Storage

log = logging.getLogger(__name__)

#: A trash record: ``id``, ``gen``, ``base``, ``segments``; once fenced
#: also ``last``, ``fence`` and ``fenced_at``.
Plan = dict[str, Any]


class Trash:
    """Deletions in progress, from their trash record to their purge."""

    def __init__(
        self,
        storage: Storage,
        store: ContextStore,
        heads: KeyIndex,
        janitor: Janitor,
        clock: Callable[[], int],
        fence_hold: float,
    ) -> None:
        self._storage, self._store, self._heads = storage, store, heads
        self._records = KeyIndex(storage, TRASH)
        self._janitor = janitor
        self._now = clock
        #: Seconds a fence is held before the purge (0 on an unshared store).
        self._fence_hold = fence_hold
        self._timers: set[asyncio.Task] = set()
        self._stopped = False

    def stop(self) -> None:
        """Purges still waiting for their fence hold are redone at the next
        start (their trash records stay)."""
        self._stopped = True
        for t in self._timers:
            t.cancel()

    async def record(self, st: ContextState) -> Plan:
        """Write the trash record of ``st``'s incarnation before its fence.
        It names the version the fence will follow at the earliest
        (``base``); the fence's own version is known once it is written."""
        plan = {
            "id": st.id,
            "gen": st.gen,
            "base": st.version,
            "segments": [
                s.to_list() for s in st.segments + st.dropped + [a for a, _ in st.archive + st.held]
            ],
        }
        name = trash_name(st.id, st.gen)
        await self._records.add(name)
        await self._storage.put(f"{TRASH}/{name}", encode_compact(plan))
        faults.crash_point("contexts.after_trash_record")
        return plan

    async def drop(self, plan: Plan) -> None:
        """Forget a trash record whose fence was not written."""
        await self._forget(trash_name(plan["id"], plan["gen"]))

    async def _forget(self, name: str) -> None:
        await self._storage.delete(f"{TRASH}/{name}")
        await self._records.remove(name)

    async def after_fence(self, st: ContextState, plan: Plan, fenced_at: int) -> str:
        """The fence of ``st`` (its latest version) is written: remove the
        head and write the record again with the fence. Returns its name."""
        plan.update(last=st.version, fence=st.version, fenced_at=fenced_at)
        plan["segments"] = await self._remove_head(st.id, st.gen, plan["segments"])
        name = trash_name(st.id, st.gen)
        await self._storage.put(f"{TRASH}/{name}", encode_compact(plan))
        return name

    async def _remove_head(self, cid: str, gen: str, segments: list[list[int]]) -> list:
        """Remove the head if it still names ``gen``; return every segment it or
        the plan names. A head another incarnation wrote meanwhile stays."""
        head = await self._store.read_head(cid)
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
            await self._storage.delete(head_key(cid), if_version=etag)
        except Conflict:
            return segments  # replaced by a new incarnation: it keeps its index entry
        await self._heads.remove(cid)
        if await self._store.read_head(cid) is not None:
            await self._heads.add(cid)  # a new incarnation was created meanwhile
        return segments

    def purge(self, name: str, plan: Plan) -> None:
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
        cid, gen = plan["id"], plan["gen"]
        fence = plan.get("fence")
        fence_key = log_key(cid, gen, int(fence)) if fence else None

        async def prepare():
            keys = await lineage.purge_keys(self._store, cid, gen, plan)
            return [lambda k=k: self._storage.delete(k) for k in keys if k != fence_key]

        async def finish():
            # The fence goes last: until then no version of the incarnation is free.
            if fence_key is not None:
                await self._storage.delete(fence_key)
            await self._forget(name)

        job = Job(f"purge {cid}", prepare, finish)
        due = int(plan.get("fenced_at", 0)) / 1000 + self._fence_hold
        wait = max(0.0, due - self._now() / 1000) if fence_key is not None else 0.0
        if wait <= 0:
            self._janitor.submit(job)
            return
        if self._stopped:
            return  # the next start's resume() purges it
        timer = asyncio.create_task(self._later(wait, job))
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)

    async def _later(self, wait: float, job: Job) -> None:
        await asyncio.sleep(wait)
        self._janitor.submit(job)

    async def resume(self) -> None:
        """Finish deletions a crash interrupted (their trash records remain)."""
        try:
            for name, item in await self._records.scan(""):
                plan = decode(item.value, f"trash record {name}")
                if not await self._fenced(plan):
                    # Crashed before the fence: the context was never deleted.
                    await self._forget(name)
                    continue
                plan["segments"] = await self._remove_head(
                    plan["id"], plan["gen"], list(plan.get("segments", ()))
                )
                self.purge(name, plan)
        except CtxdError as exc:
            log.warning("could not resume context deletions", extra={"error": str(exc)})

    async def _fenced(self, plan: Plan) -> bool:
        """Whether the plan's fence was written (or its incarnation is gone
        anyway); a plan written before its fence learns the fence's version."""
        cid, gen = plan["id"], plan["gen"]
        if "fence" in plan:
            item = await self._storage.get(log_key(cid, gen, int(plan["fence"])))
            if item is not None:
                return decode(item.value, "fence record").get("op") == "deleted"
        else:
            v = int(plan.get("base", 0)) + 1
            while (item := await self._storage.get(log_key(cid, gen, v))) is not None:
                if decode(item.value, f"log record {v}").get("op") == "deleted":
                    plan.update(last=v, fence=v)
                    plan.setdefault("fenced_at", self._now())
                    return True
                v += 1
            plan.setdefault("last", v - 1)
        head = await self._store.read_head(cid)
        return head is None or head[0].get("gen") != gen
