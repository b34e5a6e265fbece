"""Memory search over the store: the index's dimension and metric, keeping
the in-process index current, and answering a Search.

The dimension and metric are fixed per instance by the record
``memory/_search`` (``{"dims":N,"metric":"cosine"}``), written with the
first vector (the metric from ``memory.search_metric``); every later vector
and query vector is checked against it. The index
(:class:`~ctxd_sidecar.core.memory.vindex.VectorIndex`) is loaded from the
same scan that counts memory at start, updated by this process's writes,
and, where other sidecars write the same store, by the store's change feed
(PostgreSQL) or a rescan every ``memory.search_refresh`` seconds. A search
re-reads every record the index proposes, so a record deleted, expired or
rewritten elsewhere is dropped or re-scored, never returned stale.
"""

from __future__ import annotations

import asyncio
import json
import logging
from array import array
from collections.abc import Awaitable, Callable

from ctxd_sidecar.config import MemoryConfig
from ctxd_sidecar.core.errors import Conflict, InvalidArgument
from ctxd_sidecar.core.memory.records import (
    MemoryRecord,
    SearchHit,
    SearchRequest,
    StoredRecord,
    decode_record,
)
from ctxd_sidecar.core.memory.vectors import Vectors, check_dims, matches, norm, score
from ctxd_sidecar.core.memory.vindex import VectorIndex
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.store import Capability

log = logging.getLogger(__name__)

META = "_search"


class StoreSearch:
    """Search of the records a :class:`StoreMemory` keeps under ``memory/``."""

    def __init__(
        self, config: MemoryConfig, storage: Storage, prefix: str, now_ms: Callable[[], int]
    ) -> None:
        self.config = config
        self.storage = storage
        self.prefix = prefix
        self.now_ms = now_ms
        self.index = VectorIndex(
            config.search_metric, approx_threshold=config.search_approx_threshold
        )
        self._pending: list[tuple[str, str, Vectors]] = []

    @property
    def dims(self) -> int:
        return self.index.dims

    @property
    def metric(self) -> str:
        return self.index.metric

    # -- dimension and metric -----------------------------------------------------------
    async def read_meta(self) -> None:
        item = await self.storage.get(self.prefix + META)
        if item is None:
            return
        try:
            meta = json.loads(item.value)
            dims, metric = int(meta["dims"]), str(meta["metric"])
        except (ValueError, KeyError, TypeError):
            log.warning("memory search metadata unreadable; ignored")
            return
        if metric != self.config.search_metric:
            log.warning(
                "memory search metric is fixed by the stored index",
                extra={"stored": metric, "configured": self.config.search_metric},
            )
        self.index.metric, self.index.dims = metric, dims

    async def fix_dims(self, vectors: Vectors) -> None:
        """Check ``vectors`` against the index's dimension, fixing it with the
        first vector ever written."""
        if not vectors:
            return
        if not self.dims:
            await self.read_meta()
        if not self.dims:
            dims = len(next(iter(vectors.values())))
            body = json.dumps({"dims": dims, "metric": self.config.search_metric}).encode()
            try:
                await self.storage.put(self.prefix + META, body, if_absent=True)
                self.index.dims = dims
            except Conflict:
                await self.read_meta()  # another replica fixed it first
        for name, vec in vectors.items():
            check_dims(vec, self.dims, f"vectors[{name}]")

    async def check_query(self, query: array) -> None:
        if not self.dims:
            await self.read_meta()
        check_dims(query, self.dims, "query_vector")

    # -- keeping current ------------------------------------------------------------------
    def seen(self, key: str, version: str, rec: StoredRecord | None) -> None:
        """One record of the scan that counts memory at start (see :meth:`loaded`)."""
        if rec is not None and rec.vectors:
            self._pending.append((key, version, rec.vectors))

    async def loaded(self) -> None:
        """The index made of the records :meth:`seen` since the last call."""
        pending, self._pending = self._pending, []
        await self.read_meta()
        if not self.dims and pending:  # records copied without their metadata
            self.index.dims = len(next(iter(pending[0][2].values())))
        self.index.load(pending)

    async def rescan(self, scan: Callable[[], Awaitable[list]]) -> None:
        """Reload the index from the store (other replicas' writes)."""
        now = self.now_ms()
        for name, item in await scan():
            rec = decode_record(item.value)
            if rec is not None and not rec.expired(now):
                self.seen(name, item.version, rec)
        await self.loaded()

    def written(self, key: str, version: str, vectors: Vectors) -> None:
        if vectors or self.index.version(key) is not None:
            self.index.put(key, version, vectors)

    def dropped(self, key: str) -> None:
        self.index.drop(key)

    async def refresh(self, key: str) -> None:
        """Re-read one record after another replica changed it."""
        if not self.dims:  # another replica's first vector fixed the dimension
            await self.read_meta()
        item = await self.storage.get(self.prefix + key)
        rec = None if item is None else decode_record(item.value)
        if rec is None or rec.expired(self.now_ms()):
            self.index.drop(key)
        elif self.index.version(key) != item.version:
            self.written(key, item.version, rec.vectors)

    def follow(self, scan: Callable[[], Awaitable[list]]) -> list[asyncio.Task]:
        """Background tasks keeping the index current with other replicas' writes."""
        if not self.storage.shared:
            return []
        if Capability.CHANGE_FEED in self.storage.capabilities:
            return [asyncio.create_task(self._follow_feed(scan), name="memory-search-feed")]
        if self.config.search_refresh > 0:
            task = self._rescan_forever(scan)
            return [asyncio.create_task(task, name="memory-search-scan")]
        return []

    async def _follow_feed(self, scan: Callable[[], Awaitable[list]]) -> None:
        """Refresh each record the feed names; rescan once the watch is on
        (writes between the start-up scan and the watch) and whenever the
        feed says it lost track."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str] = asyncio.Queue()
        under = self.storage.namespace + self.prefix

        def changed(full: str | None) -> None:  # on the store's thread
            if full is None or (full.startswith(under) and not full[len(under) :].startswith("_")):
                loop.call_soon_threadsafe(queue.put_nowait, "" if full is None else full)

        stop = self.storage.store.watch(under, changed)
        queue.put_nowait("")
        try:
            while True:
                full = await queue.get()
                try:
                    if not full:
                        await self.rescan(scan)
                        continue
                    await self.refresh(full[len(under) :])
                except Exception:  # noqa: BLE001 - keep following
                    log.warning("memory search index not updated", exc_info=True)
        finally:
            stop()

    async def _rescan_forever(self, scan: Callable[[], Awaitable[list]]) -> None:
        while True:
            await asyncio.sleep(self.config.search_refresh)
            try:
                await self.rescan(scan)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the store may come back
                log.warning("memory search rescan failed; retrying later", exc_info=True)

    # -- searching ------------------------------------------------------------------------
    async def search(self, request: SearchRequest, query: array) -> list[SearchHit]:
        await self.check_query(query)
        filter_ = _filter(request.filter_json)
        want = request.offset + request.limit
        hits: dict[str, SearchHit] = {}
        done: set[str] = set()
        asked = want
        while True:
            ranked = self.index.ranked(request.prefix, query, request.fields, asked)
            fresh = [h for h in ranked if h[0] not in done]
            for start in range(0, len(fresh), max(want, 16)):
                batch = fresh[start : start + max(want, 16)]
                await self._verify(batch, query, request, filter_, hits)
                done.update(h[0] for h in batch)
                if len(hits) >= want:
                    break
            if len(hits) >= want or len(ranked) < asked:
                break
            asked *= 4
        best = sorted(hits.values(), key=lambda h: (-h.score, h.record.key))
        return best[request.offset : want]

    async def _verify(self, batch, query, request, filter_, hits) -> None:
        items = await asyncio.gather(*(self.storage.get(self.prefix + k) for k, *_ in batch))
        now, qn = self.now_ms(), norm(query)
        # Each hit names the version it was scored on: the index may change
        # while the records are re-read (a rescan, a write).
        for (key, s, field, scored), item in zip(batch, items, strict=True):
            rec = None if item is None else decode_record(item.value)
            if rec is None or rec.expired(now):
                if self.index.version(key) == scored:  # not re-added meanwhile
                    self.index.drop(key)
                continue
            if scored != item.version:  # scored on another version's vectors
                if self.index.version(key) == scored:  # and nothing newer came since
                    self.written(key, item.version, rec.vectors)
                best = _best(self.metric, query, qn, rec.vectors, request.fields, self.dims)
                if best is None:
                    continue
                s, field = best
            if filter_ and not _matches(rec.value, filter_):
                continue
            value = rec.value.decode() if request.include_values else None
            record = MemoryRecord(key, value, item.version, rec.ts, rec.expires_at, rec.by)
            hits[key] = SearchHit(record, s, field)


def _best(metric, query, qn, vectors: Vectors, fields, dims) -> tuple[float, str] | None:
    scored = [
        (score(metric, query, v, qn), f)
        for f, v in vectors.items()
        if len(v) == dims and (not fields or f.partition("#")[0] in fields)
    ]
    return max(scored) if scored else None


def _filter(text: str) -> dict | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        raise InvalidArgument("filter_json", "is not valid JSON") from None
    if not isinstance(value, dict):
        raise InvalidArgument("filter_json", "must be a JSON object of field -> value")
    return value


def _matches(raw: bytes, filter_: dict) -> bool:
    try:
        return matches(json.loads(raw), filter_)
    except ValueError:
        return False
