"""The automatic compaction trigger.

It runs after a turn whose reply said ``compaction_due`` (``est_tokens >
compact_at × model_window``), when ``contexts.auto_compact`` is on, in a
background task (the turn's reply is not delayed), at most one per context
at a time, with the default summariser. It folds until the kept tail is at
most :data:`AUTO_TARGET_SHARE` of the threshold, so one run buys room for
several turns. Failures are logged, counted, published as
``compaction_failed`` events and back off per context
(:class:`~ctxd_sidecar.core.compaction.Backoff`); after
``compaction.backoff_stop_after`` consecutive failures automatic attempts
stop until a compaction succeeds (any trigger) or ``backoff_resume_after``
passes. A turn starts at most one attempt, so the trigger can never loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from ctxd_sidecar.core.compaction import Backoff, BackoffPolicy
from ctxd_sidecar.core.contexts.compaction import Compactor
from ctxd_sidecar.core.contexts.events import ContextEvent, EventFeed, WatchEvent
from ctxd_sidecar.core.contexts.model import ContextState
from ctxd_sidecar.core.errors import Conflict, CtxdError, NotFound

log = logging.getLogger(__name__)

#: The automatic trigger folds until the kept tail is at most this share of
#: the threshold (``compact_at × model_window``).
AUTO_TARGET_SHARE = 0.5
#: Seconds stop() waits for automatic compactions before cancelling them.
STOP_GRACE = 2.0


@dataclass
class _Auto:
    backoff: Backoff
    task: asyncio.Task | None = None


class AutoCompaction:
    """Listens to the feed and compacts contexts whose turn made them due."""

    def __init__(self, compactor: Compactor, feed: EventFeed, *, clock=time.monotonic) -> None:
        self.compactor = compactor
        self.feed = feed
        self.config = compactor.contexts_cfg
        self._policy = BackoffPolicy.from_config(compactor.cfg)
        self._clock = clock
        self._auto: dict[str, _Auto] = {}
        self._tasks: set[asyncio.Task] = set()
        self._unlisten = None

    def start(self) -> None:
        if self._unlisten is None:
            self._unlisten = self.feed.add_listener(self._on_event)

    async def stop(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        # Let automatic runs finish; one still waiting on a slow summariser
        # after STOP_GRACE is cancelled (nothing is written before its answer).
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=STOP_GRACE)
            for t in late:
                t.cancel()
            if late:
                await asyncio.wait(late, timeout=STOP_GRACE)

    def backoff_status(self, cid: str):
        """The back-off state for ``cid`` (None: never failed)."""
        auto = self._auto.get(cid)
        return None if auto is None else auto.backoff.status()

    def _on_event(self, ev: ContextEvent, st: ContextState | None) -> None:
        if ev.kind == "turn" and st is not None:
            self._maybe_start(ev, st)
        elif ev.kind == "compaction":
            auto = self._auto.get(ev.context_id)
            if auto is not None:
                auto.backoff.record_success()
        elif ev.kind == "deleted":
            auto = self._auto.pop(ev.context_id, None)
            if auto is not None and auto.task is not None:
                auto.task.cancel()

    def _maybe_start(self, ev: ContextEvent, st: ContextState) -> None:
        if not self.config.auto_compact or not ev.detail.get("compaction_due"):
            return
        auto = self._auto.get(ev.context_id)
        if auto is None:
            auto = self._auto[ev.context_id] = _Auto(Backoff(self._policy, self._clock))
        if auto.task is not None and not auto.task.done():
            return
        if not auto.backoff.allowed():
            return
        target = int(AUTO_TARGET_SHARE * self.config.compact_at * st.model_window)
        task = asyncio.create_task(self._run(ev.context_id, auto, max(1, target)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        auto.task = task

    async def _run(self, cid: str, auto: _Auto, target: int) -> None:
        try:
            await self.compactor.compact(cid, target_tokens=target, trigger="auto")
        except NotFound:
            self._auto.pop(cid, None)
        except Conflict:
            return  # another compaction folded this prefix first: nothing failed
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure backs off, never loops
            self._failed(cid, auto, exc)

    def _failed(self, cid: str, auto: _Auto, exc: Exception) -> None:
        message = exc.message if isinstance(exc, CtxdError) else type(exc).__name__
        if not isinstance(exc, CtxdError):
            log.error(
                "automatic compaction crashed",
                extra={"context": cid, "error": type(exc).__name__},
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
        status = auto.backoff.record_failure(message)
        if status.stopped:
            then = "automatic compaction stopped"
            if status.retry_in is not None:
                then += f" for {status.retry_in:.0f}s"
        else:
            then = f"next automatic attempt in {status.retry_in:.0f}s"
        log.warning(
            "automatic compaction failed",
            extra={
                "context": cid,
                "failures": status.failures,
                "error": message,
                "stopped": status.stopped,
            },
        )
        svc = self.compactor.service
        st = svc.resident(cid)
        version = st.version if st is not None else 0
        self.feed.publish(
            WatchEvent(
                cid,
                "compaction_failed",
                version,
                svc.now(),
                detail=f"failure {status.failures}: {message}; {then}",
            )
        )
