"""Concurrency and lifecycle: parallel writers, the awaited writes of an
:class:`~ctxd_sidecar.plugin.store.AsyncStore`, flush/close, and data
surviving a reopen."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable

import pytest

from ctxd_sidecar.plugin.store import (
    AsyncStore,
    Capability,
    Item,
    PreconditionFailed,
    Store,
    Write,
)
from ctxd_sidecar.testing.store_conformance.base import StoreFixtures, declares, put_many


class ConcurrencyTests(StoreFixtures):
    def test_concurrent_writes_to_distinct_keys_all_land(self, store: Store) -> None:
        items = [(f"conc/{i}", f"value {i}".encode()) for i in range(100)]
        put_many(store, items)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            got = list(pool.map(store.get, [key for key, _ in items]))
        assert [item.value if item else None for item in got] == [value for _, value in items]


class AsyncWriteTests(StoreFixtures):
    @pytest.mark.parametrize("idle", [False, True], ids=["busy", "idle"])
    def test_awaited_writes_behave_like_put_and_delete(self, store: Store, idle: bool) -> None:
        """``aput``/``adelete`` on one event loop, many at once, whether or
        not the sidecar says its loop is idle: the same versions, refusals
        and deletes as ``put``/``delete``; a failed precondition fails its
        write alone."""
        if not isinstance(store, AsyncStore):
            pytest.skip("not an AsyncStore: the sidecar runs put/delete in worker threads")
        store.bind(lambda: idle)

        async def writes() -> tuple[list[str], list[object]]:
            versions = list(
                await asyncio.gather(*(store.aput(f"a/{i}", f"v{i}".encode()) for i in range(20)))
            )
            refused = await asyncio.gather(
                store.aput("a/0", b"again", if_absent=True),
                store.aput("a/1", b"x", if_version="stale"),
                store.aput("a/2", b"y", if_version=versions[2]),
                return_exceptions=True,
            )
            await store.adelete("a/3")
            return versions, refused

        versions, (clash, stale, fresh) = asyncio.run(writes())
        assert [store.get(f"a/{i}").version for i in (0, 1, 4)] == [versions[i] for i in (0, 1, 4)]
        assert isinstance(clash, PreconditionFailed) and isinstance(stale, PreconditionFailed)
        assert store.get("a/2") == Item(b"y", fresh)
        assert store.get("a/0").value == b"v0"
        assert store.get("a/3") is None

    @pytest.mark.parametrize("idle", [False, True], ids=["busy", "idle"])
    def test_writes_together_behave_like_puts(self, store: Store, idle: bool) -> None:
        """``put_many``/``aput_many``: every value written (one over an older
        one too), their versions in order, as ``get`` reports them."""
        if not isinstance(store, AsyncStore):
            pytest.skip("not an AsyncStore: the sidecar puts each key on its own")
        store.bind(lambda: idle)
        store.put("m/1", b"old")
        items = [Write(f"m/{i}", f"v{i}".encode()) for i in range(5)]
        versions = asyncio.run(store.aput_many(items))
        versions += store.put_many([Write("m/5", b"v5"), Write("m/0", b"again")])
        got = [store.get(f"m/{i}") for i in (0, 1, 2, 3, 4, 5)]
        assert [g.value for g in got] == [b"again", b"v1", b"v2", b"v3", b"v4", b"v5"]
        assert [g.version for g in got[1:]] == versions[1:6]
        assert got[0].version == versions[6]

    @pytest.mark.parametrize("idle", [False, True], ids=["busy", "idle"])
    def test_a_group_ends_with_its_precondition(self, store: Store, idle: bool) -> None:
        """A group's last put carries a precondition (a head naming the rest):
        applied with the group when it holds; refused with
        :class:`PreconditionFailed` otherwise, the head untouched and the
        rest written in order or not at all. Preconditions see the group's
        earlier puts."""
        if not isinstance(store, AsyncStore):
            pytest.skip("not an AsyncStore: the sidecar puts each key on its own")
        store.bind(lambda: idle)
        head = store.put("g/head", b"h1")

        async def group(*writes: Write) -> list[str] | BaseException:
            try:
                return await store.aput_many(list(writes))
            except PreconditionFailed as exc:
                return exc

        ok = asyncio.run(group(Write("g/a", b"a1"), Write("g/head", b"h2", if_version=head)))
        assert store.get("g/head") == Item(b"h2", ok[1]) and store.get("g/a").value == b"a1"
        stale = asyncio.run(group(Write("g/b", b"b1"), Write("g/head", b"h3", if_version=head)))
        assert isinstance(stale, PreconditionFailed)
        assert store.get("g/head").value == b"h2"
        assert _value(store, "g/b") in (None, b"b1")
        fresh = asyncio.run(group(Write("g/c", b"c1"), Write("g/new", b"n", if_absent=True)))
        assert store.get("g/new") == Item(b"n", fresh[1])
        seen = asyncio.run(group(Write("g/d", b"d1"), Write("g/d", b"d2", if_absent=True)))
        assert isinstance(seen, PreconditionFailed)
        assert _value(store, "g/d") in (None, b"d1")


def _value(store: Store, key: str) -> bytes | None:
    item = store.get(key)
    return None if item is None else item.value


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
