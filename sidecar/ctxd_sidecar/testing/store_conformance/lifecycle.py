"""Concurrency and lifecycle: parallel writers, the non-blocking writes of
ASYNC_WRITES (or their refusal), flush/close, and data surviving a reopen."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable

import pytest

from ctxd_sidecar.plugin.store import CallStyle, Capability, Item, PreconditionFailed, Store
from ctxd_sidecar.testing.store_conformance.base import StoreFixtures, declares, put_many


class ConcurrencyTests(StoreFixtures):
    def test_concurrent_writes_to_distinct_keys_all_land(self, store: Store) -> None:
        items = [(f"conc/{i}", f"value {i}".encode()) for i in range(100)]
        put_many(store, items)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            got = list(pool.map(store.get, [key for key, _ in items]))
        assert [item.value if item else None for item in got] == [value for _, value in items]


class AsyncWriteTests(StoreFixtures):
    def test_async_writes_behave_like_put_and_delete(self, store: Store) -> None:
        if not declares(store, CallStyle.ASYNC_WRITES):
            with pytest.raises(NotImplementedError):
                store.put_async("async/k", b"v")
            assert store.get("async/k") is None
            return
        futures = [store.put_async(f"async/{i}", f"v{i}".encode()) for i in range(50)]
        versions = [f.result(timeout=30) for f in futures]
        assert [store.get(f"async/{i}").version for i in range(50)] == versions
        stale = store.put_async("async/0", b"x", if_version="stale")
        fresh = store.put_async("async/1", b"y", if_version=versions[1])
        clash = store.put_async("async/2", b"z", if_absent=True)
        with pytest.raises(PreconditionFailed):
            stale.result(timeout=30)
        with pytest.raises(PreconditionFailed):
            clash.result(timeout=30)
        assert fresh.result(timeout=30) == store.get("async/1").version
        store.delete_async("async/3").result(timeout=30)
        assert store.get("async/3") is None
        assert store.get("async/0").value == b"v0"

    def test_async_writes_on_an_event_loop_are_that_loops_futures(self, store: Store) -> None:
        """Called on a running loop, put_async/delete_async return futures of
        that loop, completed on it; a failed precondition fails its write alone."""
        if not declares(store, CallStyle.ASYNC_WRITES):
            pytest.skip("the store does not declare ASYNC_WRITES")

        async def writes() -> tuple[list[str], BaseException | None]:
            loop = asyncio.get_running_loop()
            futures = [store.put_async(f"loop/{i}", f"v{i}".encode()) for i in range(20)]
            clash = store.put_async("loop/0", b"again", if_absent=True)
            assert all(asyncio.isfuture(f) and f.get_loop() is loop for f in futures)
            versions = list(await asyncio.gather(*futures))
            error = (await asyncio.gather(clash, return_exceptions=True))[0]
            await store.delete_async("loop/1")
            return versions, error

        versions, error = asyncio.run(writes())
        assert [store.get(f"loop/{i}").version for i in range(2, 20)] == versions[2:]
        assert isinstance(error, PreconditionFailed)
        assert store.get("loop/0").value == b"v0"
        assert store.get("loop/1") is None


class LifecycleTests(StoreFixtures):
    def test_flush_and_close_are_safe_to_call(self, make_store: Callable[[], Store]) -> None:
        opened = make_store()
        opened.put("k", b"v")
        opened.flush()
        opened.close()

    def test_data_survives_close_and_reopen(self, make_store: Callable[[], Store]) -> None:
        if not self.persistent:
            pytest.skip(f"{type(self).__name__}.persistent is False")
        first = make_store()
        try:
            version = first.put("durable", b"kept")
            first.put("gone", b"x")
            if declares(first, Capability.DELETE):
                first.delete("gone")
            first.flush()
        finally:
            first.close()
        second = make_store()
        try:
            assert second.get("durable") == Item(b"kept", version)
            if declares(second, Capability.DELETE):
                assert second.get("gone") is None
            if declares(second, Capability.LIST):
                assert "durable" in second.list("")
        finally:
            second.close()
