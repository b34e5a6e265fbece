"""Background clean-up that yields to turns.

After a checkpoint the log records its head covers are sealed and segments
no head names are deleted; a deleted context's keys are removed. None of
that is needed for correctness (restore trusts the head), so it runs here,
one job at a time in submission order, and each write waits until no turn
is being committed and none was for ``quiet`` seconds (at most
``max_wait`` seconds, so a context under constant load still gets cleaned,
slowly). A turn therefore never queues behind clean-up writes: on LMDB
every write shares one writer thread, and on S3 one connection pool.

Jobs lost to a crash are found again: a head records how far its log was
swept and which dropped segments may remain (redone at the next restore),
and a deletion keeps its trash record until its keys are gone (redone at
start). The queue is bounded (``max_jobs``): past it, sweeps are not queued
and are found again by the context's next checkpoint or restore, so a burst
of checkpoints never grows memory without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from ctxd_sidecar.core.errors import CtxdError

log = logging.getLogger(__name__)

Write = Callable[[], Awaitable[object]]


@dataclass
class Job:
    """``prepare()`` lists the writes; ``done()`` runs after all succeeded."""

    label: str
    prepare: Callable[[], Awaitable[list[Write]]]
    done: Callable[[], Awaitable[None] | None] = lambda: None
    #: Found again without this process (a sweep is redone from the head at
    #: the next restore), so it may be dropped when the queue is full.
    optional: bool = False
    #: Called instead when an optional job is dropped.
    dropped: Callable[[], None] = lambda: None


class Janitor:
    def __init__(
        self, *, batch: int = 1, quiet: float = 0.02, max_wait: float = 1.0, max_jobs: int = 4096
    ) -> None:
        self.batch = batch
        self.quiet = quiet
        self.max_wait = max_wait
        self._jobs: deque[Job] = deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task | None = None
        self._inflight = 0
        self._last_foreground = 0.0
        self._draining = False
        self.writes = 0
        #: Queue length past which optional jobs are dropped (back-pressure:
        #: a burst of checkpoints never grows the queue without bound).
        self.max_jobs = max_jobs
        self.dropped = 0

    # -- foreground ----------------------------------------------------------------
    @contextlib.contextmanager
    def foreground(self) -> Iterator[None]:
        """Wrap a turn's write: clean-up writes wait while any is in flight."""
        self._inflight += 1
        try:
            yield
        finally:
            self._inflight -= 1
            self._last_foreground = time.monotonic()

    # -- jobs -------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        if job.optional and len(self._jobs) >= self.max_jobs:
            self.dropped += 1
            job.dropped()
            return
        self._jobs.append(job)
        self._idle.clear()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="contexts-janitor")

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until every submitted job ran (True) or ``timeout`` passed."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def stop(self, timeout: float) -> None:
        """Finish what is queued without waiting for quiet, within ``timeout``."""
        self._draining = True
        self._wake.set()
        if not await self.drain(timeout):
            log.warning("context clean-up left for later", extra={"jobs": len(self._jobs)})
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            if not self._jobs:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            job = self._jobs.popleft()
            try:
                writes = await job.prepare()
                for i in range(0, len(writes), self.batch):
                    await self._wait_quiet()
                    await asyncio.gather(*(w() for w in writes[i : i + self.batch]))
                    self.writes += len(writes[i : i + self.batch])
                result = job.done()
                if result is not None:
                    await result
            except CtxdError as exc:
                log.warning("context clean-up failed", extra={"job": job.label, "error": str(exc)})
            except Exception:  # noqa: BLE001 - keep cleaning the rest
                log.exception("context clean-up failed", extra={"job": job.label})

    async def _wait_quiet(self) -> None:
        deadline = time.monotonic() + self.max_wait
        while not self._draining:
            now = time.monotonic()
            if now >= deadline:
                return
            if self._inflight == 0 and now - self._last_foreground >= self.quiet:
                return
            await asyncio.sleep(self.quiet)
