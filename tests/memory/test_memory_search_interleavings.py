"""Search while the index changes under it: two memories (two replicas) on
one store, a search whose re-read of a record is held at the store while
the index is refreshed (a rescan, as a replica without a change feed does
every ``memory.search_refresh`` seconds), then let go. A hit's score is the
score of the version the hit names, whatever happened in between."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ctxd_plugins.memory_store import MemoryStore
from ctxd_sidecar.config import MemoryConfig
from ctxd_sidecar.core.memory import Memory, SearchRequest, StoreMemory
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.store import Store


class HeldStore(Store):
    """A shared in-memory store whose next read of one key waits until the
    test lets it go (reads run on the store's threads, so the event loop
    goes on meanwhile)."""

    name = "held"
    capabilities = MemoryStore.capabilities

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.key = ""
        self.reached = threading.Event()
        self.release = threading.Event()

    def hold(self, key: str) -> None:
        self.key = key
        self.reached.clear()
        self.release.clear()

    def get(self, key):
        if self.key and key.endswith("/" + self.key):
            self.key = ""
            self.reached.set()
            self.release.wait(10)
        return self.inner.get(key)

    def put(self, key, value, *, if_version=None, if_absent=False):
        return self.inner.put(key, value, if_version=if_version, if_absent=if_absent)

    def delete(self, key, *, if_version=None):
        return self.inner.delete(key, if_version=if_version)

    def list(self, prefix, *, start_after="", limit=None):
        return self.inner.list(prefix, start_after=start_after, limit=limit)


CONFIG = MemoryConfig(sweep_interval=0, search_refresh=0)


async def replica(store: Store) -> tuple[Memory, StoreMemory]:
    backend = StoreMemory(CONFIG, Storage(store))
    memory = Memory(CONFIG, backend)
    await memory.start()
    return memory, backend


@pytest.mark.parametrize("change", ["rescan", "write"])
async def test_a_hit_is_scored_on_the_version_it_names(change):
    store = HeldStore()
    a, _ = await replica(store)
    b, b_backend = await replica(store)
    try:
        await b.set("k", '{"n":1}', vectors={"v": [1.0, 0.0]})
        # Replica A rewrites it: B's index still holds the first vector.
        await a.set("k", '{"n":2}', vectors={"v": [0.0, 1.0]})
        store.hold("k")
        query = SearchRequest(prefix="k", vector=(0.0, 1.0), limit=1)
        search = asyncio.create_task(b.search(query))
        assert await asyncio.to_thread(store.reached.wait, 10)
        index = b_backend.search_index
        if change == "rescan":  # B's periodic rescan lands while the read is held
            await index.rescan(b_backend.index.scan)
        else:  # B writes it again (the held read then sees this last version)
            await b.set("k", '{"n":3}', vectors={"v": [0.0, 1.0]})
        store.release.set()
        [hit] = await search
        got = await b.get("k")
        assert hit.record.version == got.version
        assert hit.score == pytest.approx(1.0, abs=1e-6), "scored on the vector it replaced"
    finally:
        store.release.set()
        await a.stop()
        await b.stop()
