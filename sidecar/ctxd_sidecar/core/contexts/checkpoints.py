"""Background checkpoints of resident contexts (segment + head), and what a
context leaving the cache must still write.

See the package docstring (:mod:`ctxd_sidecar.core.contexts`) for the layout; a
checkpoint is never needed for correctness (the log is the truth), so every
failure here is logged and retried by the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING

from ctxd_sidecar.core.contexts.janitor import Janitor, Job
from ctxd_sidecar.core.contexts.persistence import Cleanup, ContextStore
from ctxd_sidecar.core.contexts.registry import Entry
from ctxd_sidecar.core.errors import Conflict, CtxdError

if TYPE_CHECKING:
    from ctxd_sidecar.core.contexts.model import ContextState

log = logging.getLogger(__name__)


class Checkpointer:
    """One checkpoint at a time per context; sweeps go to the janitor."""

    def __init__(
        self,
        store: ContextStore,
        janitor: Janitor,
        spawn: Callable[[Coroutine], asyncio.Task],
        *,
        every: int,
        every_bytes: int,
    ) -> None:
        self.store = store
        self.janitor = janitor
        self._spawn = spawn
        self.every = every
        self.every_bytes = every_bytes
        #: Evicted contexts whose last checkpoint is still being written.
        self.flushing: dict[str, asyncio.Task] = {}

    def due(self, e: Entry) -> None:
        """Schedule a checkpoint when the context passed either threshold.

        While one is being written its head is not counted yet, so the turns
        that arrive meanwhile would pass the threshold again at once and
        queue a second, nearly empty checkpoint; instead the running one
        checks the thresholds again when it lands."""
        if self._over(e.state):
            if e.ckpt_task is not None and not e.ckpt_task.done():
                return
            self.schedule(e)

    def _over(self, st: ContextState | None) -> bool:
        return st is not None and (
            st.version - st.head_version >= self.every or st.unsealed_bytes >= self.every_bytes
        )

    def schedule(self, e: Entry) -> None:
        """Checkpoint ``e`` now, or again after the one being written."""
        if e.ckpt_task is not None and not e.ckpt_task.done():
            e.ckpt_again = True
            return
        e.ckpt_task = self._spawn(self._run(e))

    async def _run(self, e: Entry) -> None:
        while True:
            e.ckpt_again = False
            written = await self.checkpoint(e)
            # A failed checkpoint is retried by the next turn's due(), not here.
            if not (e.ckpt_again or (written and self._over(e.state))):
                return

    async def checkpoint(self, e: Entry) -> bool:
        """Write the entry's checkpoint now; True when a new head was written."""
        st = e.state
        if st is None or not st.loaded or st.head_etag is None or st.deleted:
            return False
        async with e.ckpt_lock:
            if e.state is not st:
                return False
            written = st.head_etag
            try:
                self.sweep(await self.store.checkpoint(st))
                return st.head_etag != written
            except Conflict:
                log.warning("context head replaced by another writer", extra={"context": st.id})
                e.stale = True
            except CtxdError as exc:
                log.warning("checkpoint failed", extra={"context": st.id, "error": str(exc)})
        return False

    def sweep(self, cleanup: Cleanup | None) -> None:
        """Seal the log records and delete the segments a written head allows."""
        if cleanup is None:
            return
        cid, gen = cleanup.cid, cleanup.gen

        async def prepare():
            writes = [
                lambda v=v: self.store.seal_log(cid, gen, v)
                for v in range(cleanup.first, cleanup.last + 1)
            ]
            writes += [lambda v=v: self.store.delete_hist(cid, gen, v) for v in cleanup.hist]
            return writes + [
                lambda s=s: self.store.delete_segment(cid, gen, s) for s in cleanup.segments
            ]

        self.janitor.submit(
            Job(f"sweep {cid}", prepare, cleanup.done, optional=True, dropped=cleanup.forget)
        )

    # -- eviction ----------------------------------------------------------------------------
    def on_evict(self, e: Entry) -> None:
        """The registry let ``e`` go: write what its head does not cover yet."""
        st = e.state
        if st is None or st.head_etag is None or st.deleted:
            return
        if not (st.version > st.head_version or st.dirty):
            return
        self.flushing[e.id] = self._spawn(self._flush_evicted(e))

    async def _flush_evicted(self, e: Entry) -> None:
        me = asyncio.current_task()
        try:
            if e.ckpt_task is not None and e.ckpt_task is not me:
                await asyncio.wait([e.ckpt_task])
            await self.checkpoint(e)
        finally:
            if self.flushing.get(e.id) is me:
                del self.flushing[e.id]

    async def wait_flushed(self, cid: str) -> None:
        """Before restoring ``cid`` again: let its eviction flush finish."""
        flushing = self.flushing.get(cid)
        if flushing is not None:
            await asyncio.wait([flushing])

    def all_dirty(self, entries: list[Entry]) -> None:
        """Schedule a checkpoint of every resident context with unsaved changes."""
        for e in entries:
            st = e.state
            if st is not None and (st.version > st.head_version or st.dirty):
                self.schedule(e)
