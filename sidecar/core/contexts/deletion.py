"""DeleteContext: a context vanishes at once, its keys go in the background.

A deletion writes a trash record (what to remove), deletes the head
(conditional: the context vanishes at once), drops it from the index, then
the janitor removes log records and segments and finally the trash record.
A deletion interrupted by a crash is finished at the next start.
"""

from __future__ import annotations

import logging
from typing import Any

from sidecar.core import faults
from sidecar.core.contexts import validate
from sidecar.core.contexts.janitor import Job
from sidecar.core.contexts.model import ROOT_ID, ContextState, SegmentRef
from sidecar.core.contexts.persistence import TRASH, decode, encode, head_key, trash_name
from sidecar.core.contexts.registry import Entry
from sidecar.core.contexts.service import ContextService, stale_version
from sidecar.core.errors import Conflict, CtxdError, FailedPrecondition, InvalidArgument

log = logging.getLogger(__name__)


class Deletion:
    """Deleting conversations over a :class:`ContextService`."""

    def __init__(self, contexts: ContextService) -> None:
        self.contexts = contexts

    async def start(self) -> None:
        # Before serving: a deletion a crash cut short must not show the
        # context again (its head may still be there).
        await self.resume()

    async def delete(self, context_id: str, expected_version: int | None = None) -> bool:
        """Delete a conversation and everything stored for it; False if it did not exist."""
        cid = validate.context_id(context_id)
        if cid == ROOT_ID:
            raise FailedPrecondition("the root context cannot be deleted")
        if expected_version is not None and expected_version < 0:
            raise InvalidArgument("expected_version", "must not be negative")
        svc = self.contexts
        async with svc.registry.use(cid) as e, e.lock:
            st = await svc.load(e)
            if st is None or not st.exists:
                # Unknown (perhaps only seen by a refused first turn): the
                # same answer whatever the expected_version.
                return False
            if expected_version is not None and expected_version != st.version:
                raise stale_version(cid, st.version, expected_version)
            if st.head_etag is None:  # never made durable here: nothing stored
                e.state = None
                svc.registry.drop(e)
                return False
            await self.delete_locked(e, st)
        svc.emit("deleted", None, cid, st.version)
        return True

    async def delete_locked(self, e: Entry, st: ContextState) -> None:
        """Delete ``st`` (held under ``e.lock``): trash record, head, index."""
        svc = self.contexts
        async with e.ckpt_lock:
            name = trash_name(st.id, st.gen)
            plan = {
                "id": st.id,
                "gen": st.gen,
                "last": st.version,
                "segments": [s.to_list() for s in st.segments + st.dropped],
            }
            await svc.trash.add(name)
            await svc.storage.put(f"{TRASH}/{name}", encode(plan))
            faults.crash_point("contexts.after_trash_record")
            try:
                await svc.storage.delete(head_key(st.id), if_version=st.head_etag)
            except Conflict:
                e.stale = True
                # Not deleted after all: the trash record must not finish it later.
                await svc.storage.delete(f"{TRASH}/{name}")
                await svc.trash.remove(name)
                raise Conflict(f"context {st.id} changed elsewhere; re-read and retry") from None
            await svc.index.remove(st.id)
            e.state = None
            svc.registry.drop(e)
        faults.crash_point("contexts.after_head_delete")
        self._purge(name, plan)

    def _purge(self, name: str, plan: dict[str, Any]) -> None:
        """Remove a deleted incarnation's keys in the background, then its trash record."""
        svc = self.contexts

        async def prepare():
            keys = await svc.store.keys_of(
                plan["id"],
                plan["gen"],
                int(plan["last"]),
                [SegmentRef.from_list(s) for s in plan.get("segments", ())],
            )
            return [lambda k=k: svc.storage.delete(k) for k in keys]

        async def done():
            await svc.storage.delete(f"{TRASH}/{name}")
            await svc.trash.remove(name)

        svc.janitor.submit(Job(f"purge {plan['id']}", prepare, done))

    async def resume(self) -> None:
        """Finish deletions a crash interrupted (their trash records remain)."""
        svc = self.contexts
        try:
            for name, item in await svc.trash.scan(""):
                plan = decode(item.value, f"trash record {name}")
                head = await svc.store.read_head(plan["id"])
                if head is not None and head[0].get("gen") == plan["gen"]:
                    await svc.storage.delete(head_key(plan["id"]))
                    await svc.index.remove(plan["id"])
                self._purge(name, plan)
        except CtxdError as exc:
            log.warning("could not resume context deletions", extra={"error": str(exc)})
