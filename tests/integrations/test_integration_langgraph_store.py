"""CtxdStore against LangGraph's own store behaviours, on a real sidecar.

Adapted from langgraph ``libs/checkpoint/tests/test_store.py`` (namespace
listing with prefix, suffix, wildcards, depth and paging; namespace
validation through the public API and past it; filtered search with
paging, where the semantic ``query`` is ignored), run through both the
sync and the async API, plus what the interface asks of a TTL store:
``created_at``/``updated_at``, TTL in minutes, refresh on read.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("langgraph.store.base")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from langgraph.store.base import InvalidNamespaceError, PutOp  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from ctxd_client import AsyncClient, Client  # noqa: E402
from ctxd_client.integrations.langgraph import CtxdStore  # noqa: E402


@pytest.fixture
def address(start_sidecar) -> str:
    return start_sidecar("memory://").address


@pytest.fixture(params=["sync", "async"])
def store(request, address):
    """A store driven through the sync API (Client) or the async one (AsyncClient)."""
    if request.param == "sync":
        s = CtxdStore(Client(address))
        yield _Sync(s)
        s.close()
    else:
        yield _Async(CtxdStore(address))


class _Sync:
    """The store's sync API, awaited like the async one (one test body for both)."""

    def __init__(self, store: CtxdStore) -> None:
        self.store = store

    def __getattr__(self, name):
        method = getattr(self.store, name.removeprefix("a"))

        async def call(*args, **kw):
            return method(*args, **kw)

        return call


class _Async:
    def __init__(self, store: CtxdStore) -> None:
        self.store = store

    def __getattr__(self, name):
        return getattr(self.store, name)


NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("b", "a", "f"),
    ("users", "123"),
    ("users", "456", "settings"),
    ("admin", "users", "789"),
]


async def _fill(store, namespaces) -> None:
    for i, ns in enumerate(namespaces):
        await store.aput(ns, f"id_{i}", {"data": f"value_{i:02d}"})


async def test_list_namespaces_basic(store):
    await _fill(store, NAMESPACES)
    ls = store.alist_namespaces
    assert sorted(await ls(prefix=("a", "b"))) == sorted(NAMESPACES[:4])
    assert sorted(await ls(suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert sorted(await ls(prefix=("a",), suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(await ls(prefix=("a", "b"), max_depth=3)) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert await ls(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert await ls(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(await ls(prefix=("a", "*", "f"))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(await ls(suffix=("*", "f"))) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]  # noqa: E501
    assert await ls(prefix=("nonexistent",)) == []
    assert await ls(prefix=("users", "123")) == [("users", "123")]


async def test_list_namespaces_with_wildcards(store):
    await _fill(
        store,
        [
            ("users", "123"),
            ("users", "456"),
            ("users", "789", "settings"),
            ("admin", "users", "789"),
            ("guests", "123"),
            ("guests", "456", "preferences"),
        ],
    )
    ls = store.alist_namespaces
    assert sorted(await ls(prefix=("users", "*"))) == [
        ("users", "123"),
        ("users", "456"),
        ("users", "789", "settings"),
    ]
    assert await ls(suffix=("*", "preferences")) == [("guests", "456", "preferences")]
    assert await ls(prefix=("*", "users"), suffix=("*", "settings")) == []


async def test_list_namespaces_pagination_depth_and_empty(store):
    assert await store.alist_namespaces() == []
    for i in range(20):
        await store.aput(("namespace", f"sub_{i:02d}"), f"id_{i:02d}", {"i": i})
    for offset in (0, 5, 15):
        got = await store.alist_namespaces(prefix=("namespace",), limit=5, offset=offset)
        assert got == [("namespace", f"sub_{i:02d}") for i in range(offset, offset + 5)]
    await _fill(store, [("a", "b", "c", "d"), ("a", "g"), ("h", "i", "j", "k")])
    assert sorted(await store.alist_namespaces(max_depth=2)) == [
        ("a", "b"),
        ("a", "g"),
        ("h", "i"),
        ("namespace", "sub_00"),
    ] + [("namespace", f"sub_{i:02d}") for i in range(1, 20)]


async def test_namespace_rules_of_the_public_api_and_past_it(store):
    doc = {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            await store.aput(bad, "foo", doc)
    ns = ("foo", "langgraph", "foo")
    await store.aput(ns, "bar", doc)
    assert (await store.aget(ns, "bar")).value == doc
    assert (await store.asearch(ns))[0].value == doc
    await store.adelete(ns, "bar")
    assert await store.aget(ns, "bar") is None
    # Past the public API a "langgraph" root is allowed, as in LangGraph's stores.
    await store.abatch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert (await store.aget(("langgraph", "foo"), "bar")).value == doc
    await store.adelete(("langgraph", "foo"), "bar")
    assert await store.aget(("langgraph", "foo"), "bar") is None


DOCS = [
    ("doc1", {"text": "red apple", "color": "red", "score": 4.5, "tags": {"kind": "fruit"}}),
    ("doc2", {"text": "red car", "color": "red", "score": 3.0, "tags": {"kind": "vehicle"}}),
    ("doc3", {"text": "green apple", "color": "green", "score": 4.0, "tags": {"kind": "fruit"}}),
    ("doc4", {"text": "blue car", "color": "blue", "score": 3.5, "tags": {"kind": "vehicle"}}),
]


async def test_search_with_filters_and_paging(store):
    for key, value in DOCS:
        await store.aput(("test",), key, value)
    await store.aput(("test", "deeper"), "doc5", {"color": "red", "score": 1})
    await store.aput(("testing",), "doc6", {"color": "red"})  # not under ("test",)
    keys = lambda items: [i.key for i in items]  # noqa: E731
    assert keys(await store.asearch(("test",), filter={"color": "red"})) == ["doc1", "doc2", "doc5"]  # noqa: E501
    assert keys(await store.asearch(("test",), filter={"score": {"$gt": 3.2}})) == [
        "doc1",
        "doc3",
        "doc4",
    ]  # noqa: E501
    both = {"score": {"$gte": 4.0}, "color": "green"}
    assert keys(await store.asearch(("test",), filter=both)) == ["doc3"]
    assert keys(await store.asearch(("test",), filter={"tags": {"kind": "vehicle"}})) == [
        "doc2",
        "doc4",
    ]  # noqa: E501
    assert keys(await store.asearch(("test",), filter={"color": {"$ne": "red"}})) == [
        "doc3",
        "doc4",
    ]  # noqa: E501
    page1 = await store.asearch(("test",), limit=2)
    page2 = await store.asearch(("test",), limit=2, offset=2)
    assert keys(page1) == ["doc1", "doc2"] and keys(page2) == ["doc3", "doc4"]
    assert len(await store.asearch(("test",), limit=10)) == 5
    # No semantic index: a query neither narrows nor fails.
    for query in ("", None, "test " * 100, "test!@#$%^&*()"):
        assert len(await store.asearch(("test",), query=query, limit=10)) == 5
    item = (await store.asearch(("test", "deeper")))[0]
    assert item.namespace == ("test", "deeper") and item.value == {"color": "red", "score": 1}


async def test_created_at_stays_updated_at_moves(store):
    await store.aput(("t",), "k", {"v": 1})
    first = await store.aget(("t",), "k")
    time.sleep(0.01)
    await store.aput(("t",), "k", {"v": 2})
    second = await store.aget(("t",), "k")
    assert second.value == {"v": 2}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at >= first.created_at


async def test_any_text_in_labels_and_keys(store):
    ns = ("user name with spaces", "emoji 🚀", "per%cent", "til~de", "a/b")
    keys = ["", "key with spaces", "dots.in.key", "~", "%", "slash/key"]
    for i, key in enumerate(keys):
        await store.aput(ns, key, {"i": i})
    for i, key in enumerate(keys):
        assert (await store.aget(ns, key)).value == {"i": i}
    assert await store.alist_namespaces(prefix=ns[:2]) == [ns]
    assert sorted(i.key for i in await store.asearch(ns, limit=20)) == sorted(keys)


def test_ttl_in_minutes_with_refresh_on_read(address):
    store = CtxdStore(Client(address), ttl={"default_ttl": 10, "refresh_on_read": True})
    raw = Client(address)
    key = store._key(("ttl",), "k")
    store.put(("ttl",), "k", {"v": 1})
    rec = raw.memory_get(key)
    assert 599_000 <= rec.expires_at_ms - rec.updated_ms <= 600_000
    time.sleep(0.01)
    store.get(("ttl",), "k", refresh_ttl=False)
    assert raw.memory_get(key).expires_at_ms == rec.expires_at_ms
    store.get(("ttl",), "k")  # refreshes
    refreshed = raw.memory_get(key)
    assert refreshed.expires_at_ms > rec.expires_at_ms
    assert json.loads(refreshed.value_json)["v"] == {"v": 1}
    store.search(("ttl",))  # searching refreshes too
    assert raw.memory_get(key).expires_at_ms >= refreshed.expires_at_ms
    store.put(("ttl",), "forever", {"v": 2}, ttl=None)
    assert raw.memory_get(store._key(("ttl",), "forever")).expires_at_ms == 0
    store.put(("ttl",), "short", {"v": 3}, ttl=1 / 60)  # one second
    time.sleep(1.2)
    assert store.get(("ttl",), "short") is None
    store.close()
    raw.close()


@pytest.mark.parametrize("api", ["sync", "async"])
async def test_a_refreshing_read_keeps_updated_at(address, api):
    """Refreshing the TTL on read is not an update: LangGraph's own store
    (the control) and CtxdStore keep ``updated_at`` through get and search."""
    ttl = {"default_ttl": 10, "refresh_on_read": True}
    own = CtxdStore(Client(address) if api == "sync" else address, ttl=ttl)
    raw = Client(address)
    key = own._key(("ttl",), "k")
    for store in (_Async(InMemoryStore()), _Sync(own) if api == "sync" else _Async(own)):
        await store.aput(("ttl",), "k", {"v": 1})
        first = await store.aget(("ttl",), "k")
        expires = raw.memory_get(key).expires_at_ms if store.store is own else 0
        time.sleep(0.01)
        await store.aget(("ttl",), "k", refresh_ttl=True)
        await store.asearch(("ttl",), refresh_ttl=True)
        again = await store.aget(("ttl",), "k", refresh_ttl=False)
        assert again.updated_at == first.updated_at, type(store.store).__name__
        assert again.created_at == first.created_at and again.value == {"v": 1}
    assert raw.memory_get(key).expires_at_ms > expires  # the reads did refresh the TTL
    own.close()
    raw.close()


async def test_async_client_and_concurrent_puts(address):
    client = AsyncClient(address)
    store = CtxdStore(client)
    await asyncio.gather(*(store.aput(("c",), f"k{i}", {"i": i}) for i in range(30)))
    await asyncio.gather(*(store.adelete(("c",), f"k{i}") for i in range(0, 30, 2)))
    got = await store.asearch(("c",), limit=100)
    assert sorted(i.value["i"] for i in got) == list(range(1, 30, 2))
    # One batch: reads see the state before its puts; the last put of a key wins.
    out = await store.abatch(
        [
            PutOp(("c",), "x", {"n": 1}),
            PutOp(("c",), "x", {"n": 2}),
        ]
    )
    assert out == [None, None]
    assert (await store.aget(("c",), "x")).value == {"n": 2}
    await client.close()


async def test_labels_and_keys_as_long_as_langgraphs_own_stores_take(store):
    """A 60-character label and a 200-character key (281 characters as one
    ctxd key) and longer: stored under a digest, read back as given, listed
    and searched under their namespace prefix, no two colliding."""
    ns = ("n" * 60, "é" * 100)
    keys = ["k" * 200, "k" * 199 + "j", "ключ" * 80, "short"]
    for i, key in enumerate(keys):
        await store.aput(ns, key, {"i": i})
    for i, key in enumerate(keys):
        got = await store.aget(ns, key)
        assert (got.namespace, got.key, got.value) == (ns, key, {"i": i})
    found = await store.asearch(ns[:1], limit=10)
    assert sorted((i.namespace, i.key) for i in found) == sorted((ns, k) for k in keys)
    assert await store.alist_namespaces(prefix=ns[:1]) == [ns]
    assert await store.alist_namespaces(max_depth=1) == [ns[:1]]
    await store.adelete(ns, keys[0])
    assert await store.aget(ns, keys[0]) is None
    assert (await store.aget(ns, keys[1])).value == {"i": 1}


def test_an_item_stored_before_digests_is_read_and_moved_on_its_next_put(address):
    """An item whose key (over 64 encoded characters, under 256 in all) was
    written before long keys were digested: ``get`` finds it, and its next
    put moves it to the digest key, keeping ``created_at``."""
    store, raw = CtxdStore(Client(address)), Client(address)
    ns, key = ("old",), "k" * 100
    legacy = f"langgraph-store/old/!/{key}"
    assert store._key(ns, key) != legacy and store._legacy(ns, key) == legacy
    raw.memory_set(legacy, value_json=json.dumps({"v": {"n": 1}, "c": 1000, "u": 1000}))
    assert store.get(ns, key).value == {"n": 1}
    store.put(ns, key, {"n": 2})
    got = store.get(ns, key)
    assert got.value == {"n": 2} and got.created_at.timestamp() == 1.0
    assert [r.key for r in raw.memory_list("langgraph-store/old/")] == [store._key(ns, key)]
    assert [i.value for i in store.search(ns)] == [{"n": 2}]
    store.put(ns, key, None)
    assert store.get(ns, key) is None
    store.close()
    raw.close()


async def test_a_dotted_filter_key_is_a_path_into_nested_objects(store):
    """As LangGraph's SQLite and Postgres stores read ``{"user.access-level": ...}``."""
    await store.aput(("docs",), "a", {"user": {"access-level": "admin", "age": 40}})
    await store.aput(("docs",), "b", {"user": {"access-level": "guest", "age": 20}})
    await store.aput(("docs",), "c", {"user": "flat"})
    keys = lambda items: sorted(i.key for i in items)  # noqa: E731
    assert keys(await store.asearch(("docs",), filter={"user.access-level": "admin"})) == ["a"]
    assert keys(await store.asearch(("docs",), filter={"user.age": {"$lt": 30}})) == ["b"]
    ne = {"user.access-level": {"$ne": "admin"}}
    assert keys(await store.asearch(("docs",), filter=ne)) == ["b", "c"]
    assert keys(await store.asearch(("docs",), filter={"user": "flat"})) == ["c"]


def test_the_store_imports_without_langchain(tmp_path):
    """The store needs LangGraph, not LangChain: with ``langchain`` unimportable,
    ``from ctxd_client.integrations.langgraph import CtxdStore`` still works."""
    script = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "langchain" or name.startswith("langchain."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from ctxd_client.integrations.langgraph import CtxdStore
print("store", CtxdStore.__name__)
try:
    from ctxd_client.integrations.langgraph import CtxdContextMiddleware
except ModuleNotFoundError as exc:
    print("middleware", exc.name)
"""
    clients = Path(__file__).resolve().parents[2] / "clients" / "python"
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(clients)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["store", "CtxdStore", "middleware", "langchain"], proc.stdout


async def test_thousands_of_concurrent_operations_through_one_async_client(start_sidecar):
    """6,000 puts, gets and searches at once through one AsyncClient all
    complete (without a cap on calls in flight, hundreds ended CANCELLED)."""
    client = AsyncClient(start_sidecar("memory://").address)
    store = CtxdStore(client)

    async def one(i: int):
        ns = ("users", str(i % 50))
        if i % 3 == 0:
            return await store.aput(ns, f"k{i}", {"i": i})
        if i % 3 == 1:
            return await store.aget(ns, f"k{i - 1}")
        return await store.asearch(ns, limit=5)

    results = await asyncio.gather(*(one(i) for i in range(6000)), return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    assert not failed, f"{len(failed)} failed, e.g. {failed[0]!r}"
    assert len(await store.asearch(("users", "0"), limit=1000)) == 40
    await client.close()
    with pytest.raises(ValueError, match="max_in_flight"):
        AsyncClient("127.0.0.1:1", max_in_flight=0)


def test_a_namespace_too_deep_for_ctxd_is_refused_clearly(address):
    from ctxd_client.errors import InvalidArgument

    store = CtxdStore(address)
    with pytest.raises(InvalidArgument) as bad:
        store.put(tuple("n" * 60 for _ in range(5)), "k", {"v": 1})
    assert "key" in str(bad.value)
    store.close()
