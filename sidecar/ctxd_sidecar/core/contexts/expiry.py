"""Closing idle conversations: after ``contexts.conversation_ttl`` without a
turn a conversation is deleted or archived (``contexts.on_expire``). Root
never expires. The sweep runs every ``contexts.expire_interval`` seconds.
"""

from __future__ import annotations

import asyncio
import logging

from ctxd_sidecar.core.contexts.deletion import Deletion
from ctxd_sidecar.core.contexts.listing import Listing
from ctxd_sidecar.core.contexts.model import ROOT, ROOT_ID
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.contexts.transaction import Missing
from ctxd_sidecar.core.errors import CtxdError

log = logging.getLogger(__name__)

#: Contexts examined per page by the idle-expiry sweep.
SWEEP_PAGE = 200


class Expiry:
    def __init__(self, contexts: ContextService, listing: Listing, deletion: Deletion) -> None:
        self.contexts = contexts
        self.config = contexts.config
        self.listing = listing
        self.deletion = deletion
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        ttl, every = self.config.conversation_ttl, self.config.expire_interval
        if ttl > 0 and every > 0:
            self._task = asyncio.create_task(self._loop(every), name="contexts-expiry")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _loop(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self.expire_idle()
            except CtxdError as exc:
                log.warning("idle-conversation sweep failed", extra={"error": str(exc)})
            except Exception:  # noqa: BLE001 - keep sweeping
                log.exception("idle-conversation sweep failed")

    async def expire_idle(self) -> int:
        """Close conversations idle longer than ``conversation_ttl``; return how many."""
        ttl_ms = int(self.config.conversation_ttl * 1000)
        if ttl_ms <= 0:
            return 0
        svc = self.contexts
        closed = 0
        after = ""
        while True:
            batch = await svc.heads("", after, SWEEP_PAGE)
            for name, item in batch:
                after = name
                if name == ROOT_ID:
                    continue
                info = await self.listing.listed(name, item)
                if info is None or info.archived or svc.now() - info.updated <= ttl_ms:
                    continue
                if await self._close(name, ttl_ms):
                    closed += 1
            if len(batch) < SWEEP_PAGE:
                return closed

    async def _close(self, cid: str, ttl_ms: int) -> bool:
        svc = self.contexts
        async with svc.transaction(cid, missing=Missing.ABSENT) as tx:
            while await tx.next():
                st = tx.state
                if st.kind == ROOT or st.archived:
                    return False
                if svc.now() - st.updated <= ttl_ms:
                    return False  # a turn arrived meanwhile
                if self.config.on_expire == "delete":
                    if not await self.deletion.fence(tx):
                        continue  # another replica wrote it meanwhile: decide again
                    kind = "deleted"
                else:
                    await svc.archive(tx)
                    kind = "archived"
                break
            else:
                return False
        log.info("idle conversation closed", extra={"context": cid, "action": kind})
        svc.emit(kind, None, cid, st.version)
        return True
