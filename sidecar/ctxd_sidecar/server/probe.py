"""The store probe behind the ctxd services' health (readiness).

Overall health ("") stays SERVING so a liveness probe does not restart a pod
whose only problem is the store; readiness should check a service name
(e.g. ``ctxd.v1.ContextService``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from grpc_health.v1 import health, health_pb2

from ctxd_sidecar.core.errors import CtxdError
from ctxd_sidecar.core.storage import Storage

log = logging.getLogger(__name__)

#: Bytes the probe writes (then deletes) while the store is full: room for a
#: write this size is room for a largest memory value and a turn's record.
FULL_PROBE_BYTES = 256 * 1024


class StoreProbe:
    """Probes the store every ``interval`` seconds; the services named are
    NOT_SERVING while it fails, or while it is full (a write failed for want
    of space) until a write succeeds again."""

    def __init__(
        self,
        storage: Storage,
        health_servicer: health.aio.HealthServicer,
        services: Iterable[str],
        interval: float,
        stopped: asyncio.Event,
    ) -> None:
        self._storage = storage
        self._health = health_servicer
        self._services = tuple(services)
        self._interval = interval
        self._stopped = stopped
        self._ok = True

    async def run(self) -> None:
        if self._interval <= 0:
            return
        while not self._stopped.is_set():
            await asyncio.sleep(self._interval)
            ok = await self._check()
            if ok != self._ok and not self._stopped.is_set():
                self._ok = ok
                await self._announce(ok)

    async def _check(self) -> bool:
        storage, timeout = self._storage, max(self._interval, 1.0)
        try:
            if storage.full:
                # Reads still work on a full disk: only a write shows room,
                # and one large enough that the next real write fits too.
                await asyncio.wait_for(
                    storage.make_room("health/probe", FULL_PROBE_BYTES), timeout=timeout
                )
            else:
                await asyncio.wait_for(storage.get("health/probe"), timeout=timeout)
            return True
        except (CtxdError, TimeoutError):
            return False

    async def _announce(self, ok: bool) -> None:
        serving = health_pb2.HealthCheckResponse
        for name in self._services:
            await self._health.set(name, serving.SERVING if ok else serving.NOT_SERVING)
        if ok:
            log.info("store recovered")
        elif self._storage.full:
            log.warning("store full; services NOT_SERVING until a write succeeds")
        else:
            log.warning("store unavailable; services NOT_SERVING until it recovers")
