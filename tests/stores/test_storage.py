"""Storage: namespacing, tombstones, key limits and error mapping over real
backends, plus the failure modes of LMDB (map full, stale readers) and of an
S3 endpoint that is down."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import threading
import uuid

import boto3
import lmdb
import pytest

from ctxd_plugins.lmdb_store import LmdbStore
from ctxd_plugins.memory_store import MemoryStore
from ctxd_sidecar.core.errors import Conflict, InvalidArgument, LimitExceeded, Unavailable
from ctxd_sidecar.core.storage import TOMBSTONE, Storage
from ctxd_sidecar.plugin.manager import open_store
from ctxd_sidecar.plugin.store import (
    AsyncStore,
    CallStyle,
    Capability,
    Item,
    PreconditionFailed,
    Store,
    StoreError,
    StoreFull,
    StoreUnavailable,
    Write,
)
from tests.conftest import free_port, s3_uri

LIST, DELETE, CAS = Capability.LIST, Capability.DELETE, Capability.CONDITIONAL_PUT


class LimitedStore(Store):
    """An in-memory backend declaring only some capabilities, as a minimal
    third-party plugin would. Undeclared abilities raise NotImplementedError,
    so a Storage that used one fails the test."""

    name = "limited"

    def __init__(self, capabilities=(), max_key_bytes: int | None = None) -> None:
        self.inner = MemoryStore()
        self.capabilities = frozenset(capabilities)
        self.max_key_bytes = max_key_bytes

    def get(self, key):
        return self.inner.get(key)

    def put(self, key, value, *, if_version=None, if_absent=False):
        if (if_version is not None or if_absent) and CAS not in self.capabilities:
            raise NotImplementedError("limited store does not declare CONDITIONAL_PUT")
        return self.inner.put(key, value, if_version=if_version, if_absent=if_absent)

    def delete(self, key, *, if_version=None):
        if DELETE not in self.capabilities:
            return super().delete(key, if_version=if_version)
        return self.inner.delete(key, if_version=if_version)

    def list(self, prefix, *, start_after="", limit=None):
        if LIST not in self.capabilities:
            return super().list(prefix, start_after=start_after, limit=limit)
        return self.inner.list(prefix, start_after=start_after, limit=limit)


class FailingStore(Store):
    """A backend whose every call fails with one store error."""

    name = "failing"
    capabilities = frozenset({LIST, DELETE, CAS})

    def __init__(self, error: StoreError, inline_reads: bool) -> None:
        self.error = error
        if inline_reads:
            self.call_style = frozenset({CallStyle.INLINE_READS})

    def get(self, key):
        raise self.error

    def put(self, key, value, *, if_version=None, if_absent=False):
        raise self.error

    def delete(self, key, *, if_version=None):
        raise self.error

    def list(self, prefix, *, start_after="", limit=None):
        raise self.error


@pytest.fixture
async def storage_for():
    """Factory: a Storage over a store; every one is closed at teardown."""
    made: list[Storage] = []

    def make(store: Store, **kwargs) -> Storage:
        made.append(Storage(store, **kwargs))
        return made[-1]

    yield make
    closed: set[int] = set()
    for storage in made:
        if id(storage.store) in closed:  # a shared store is closed only once
            storage._pool.shutdown(wait=True)
            continue
        closed.add(id(storage.store))
        await storage.close()


# -- namespacing ----------------------------------------------------------------------
async def test_instances_sharing_a_store_cannot_see_each_others_keys(store_uri, storage_for):
    store = open_store(store_uri)
    a = storage_for(store, instance="a")
    ab = storage_for(store, instance="ab")
    other_prefix = storage_for(store, prefix="other", instance="a")
    await a.put("memory/k", b"from a")
    await ab.put("memory/k", b"from ab")
    await other_prefix.put("memory/k", b"from other/a")
    await ab.put("memory/only-ab", b"x")

    assert (await a.get("memory/k")).value == b"from a"
    assert (await ab.get("memory/k")).value == b"from ab"
    assert (await other_prefix.get("memory/k")).value == b"from other/a"
    assert await a.get("memory/only-ab") is None
    assert await a.get("../ab/memory/only-ab") is None  # keys are opaque, never paths
    assert store.get("ctxd/a/memory/k").value == b"from a"  # the documented layout
    assert store.get("other/a/memory/k").value == b"from other/a"
    if a.can_list:
        assert await a.list("") == ["memory/k"]
        assert await ab.list("memory/") == ["memory/k", "memory/only-ab"]
        assert await other_prefix.list("") == ["memory/k"]
        assert await a.list("", start_after="memory/") == ["memory/k"]

    await a.delete("memory/k")
    assert (await ab.get("memory/k")).value == b"from ab"
    assert (await other_prefix.get("memory/k")).value == b"from other/a"


async def test_an_empty_prefix_namespaces_by_instance_alone(storage_for):
    store = MemoryStore()
    storage = storage_for(store, prefix="", instance="i1")
    await storage.put("k", b"v")
    assert store.list("") == ["i1/k"]


@pytest.mark.parametrize("instance", ["", "a/b", "/"])
def test_an_instance_that_could_overlap_another_is_refused(instance):
    with pytest.raises(ValueError, match="instance"):
        Storage(MemoryStore(), instance=instance)


# -- tombstones -------------------------------------------------------------------------
async def test_delete_on_a_store_without_delete_writes_a_tombstone(storage_for):
    store = LimitedStore({LIST, CAS})
    storage = storage_for(store)
    await storage.put("k", b"value")
    await storage.put("kept", b"value")
    await storage.delete("k")
    assert await storage.get("k") is None
    assert store.get("ctxd/default/k").value == TOMBSTONE
    assert await storage.list("") == ["kept"]
    assert (await storage.get("kept")).value == b"value"


async def test_a_tombstoned_key_counts_as_absent_for_create_only(storage_for):
    storage = storage_for(LimitedStore({CAS}))
    await storage.put("k", b"old")
    with pytest.raises(Conflict):
        await storage.put("k", b"intruder", if_absent=True)
    await storage.delete("k")
    version = await storage.put("k", b"new", if_absent=True)
    assert await storage.get("k") == Item(b"new", version)
    with pytest.raises(Conflict):
        await storage.put("k", b"again", if_absent=True)


async def test_conditional_delete_by_tombstone_checks_the_version(storage_for):
    storage = storage_for(LimitedStore({CAS}))
    stale = await storage.put("k", b"one")
    current = await storage.put("k", b"two")
    with pytest.raises(Conflict):
        await storage.delete("k", if_version=stale)
    assert (await storage.get("k")).value == b"two"
    await storage.delete("k", if_version=current)
    assert await storage.get("k") is None


async def test_listing_skips_tombstones_and_still_fills_the_page(storage_for):
    storage = storage_for(LimitedStore({LIST, CAS}))
    for key in "abcdefg":
        await storage.put(f"p/{key}", b"v")
    for key in "abdf":
        await storage.delete(f"p/{key}")
    assert await storage.list("p/") == ["p/c", "p/e", "p/g"]
    assert await storage.list("p/", limit=2) == ["p/c", "p/e"]
    assert await storage.list("p/", start_after="p/c", limit=1) == ["p/e"]
    assert await storage.list("p/", start_after="p/e", limit=5) == ["p/g"]
    assert await storage.list("p/", limit=0) == []


async def test_a_store_without_conditional_writes_gets_preconditions_checked_by_the_sidecar(
    storage_for,
):
    # LimitedStore fails the test if it is ever sent a precondition.
    storage = storage_for(LimitedStore({DELETE}))
    version = await storage.put("k", b"v")
    with pytest.raises(Conflict):
        await storage.put("k", b"w", if_version="stale")
    with pytest.raises(Conflict):
        await storage.put("k", b"w", if_absent=True)
    with pytest.raises(Conflict):
        await storage.delete("k", if_version="stale")
    assert (await storage.get("k")).value == b"v"
    v2 = await storage.put("k", b"w", if_version=version)
    assert (await storage.get("k")).version == v2
    assert await storage.put("new", b"x", if_absent=True)
    await storage.delete("k", if_version=v2)
    assert await storage.get("k") is None


async def test_sidecar_preconditions_hold_under_concurrent_writers(storage_for):
    storage = storage_for(LimitedStore({DELETE}))
    results = await asyncio.gather(
        *(storage.put("race", f"w{i}".encode(), if_absent=True) for i in range(20)),
        return_exceptions=True,
    )
    assert sum(not isinstance(r, Exception) for r in results) == 1
    assert all(isinstance(r, Conflict) for r in results if isinstance(r, Exception))


async def test_listing_a_store_without_list_is_refused(storage_for):
    storage = storage_for(LimitedStore({DELETE, CAS}))
    assert not storage.can_list
    with pytest.raises(RuntimeError, match="LIST"):
        await storage.list("")


# -- key length -------------------------------------------------------------------------
async def test_keys_longer_than_the_store_allows_are_refused_before_any_call(storage_for):
    store = LimitedStore({LIST, DELETE, CAS}, max_key_bytes=40)
    storage = storage_for(store)  # namespace "ctxd/default/": 13 bytes, 27 left
    assert storage.key_room() == 27
    assert storage.key_room(reserved=7) == 20
    fits = "k" * 27
    await storage.put(fits, b"v")
    assert (await storage.get(fits)).value == b"v"
    for too_long in ("k" * 28, "é" * 14):  # 14 characters, 28 bytes
        for call in (
            storage.put(too_long, b"v"),
            storage.get(too_long),
            storage.delete(too_long),
        ):
            with pytest.raises(InvalidArgument) as err:
                await call
            assert err.value.field == "key"
            assert "at most 27 bytes" in err.value.message
    assert store.list("") == [f"ctxd/default/{fits}"]


async def test_lmdb_key_limit_is_a_clear_invalid_argument(tmp_path, storage_for):
    storage = storage_for(open_store(f"lmdb://{tmp_path / 'db'}?map_size=16MiB"))
    room = storage.key_room()
    await storage.put("x" * room, b"fits")
    assert (await storage.get("x" * room)).value == b"fits"
    with pytest.raises(InvalidArgument, match=f"at most {room} bytes"):
        await storage.put("x" * (room + 1), b"too long")


async def test_s3_key_limit_counts_the_stores_own_prefix(store_uri_for, storage_for):
    storage = storage_for(open_store(store_uri_for("s3")))  # object keys start "pfx/"
    room = 1024 - len("pfx/") - len("ctxd/default/")
    assert storage.key_room() == room
    await storage.put("k" * room, b"fits")
    assert (await storage.get("k" * room)).value == b"fits"
    with pytest.raises(InvalidArgument):
        await storage.put("k" * (room + 1), b"would be a 1025-byte object key")


# -- error mapping -----------------------------------------------------------------------
@pytest.mark.parametrize("inline_reads", [True, False], ids=["inline", "threaded"])
@pytest.mark.parametrize(
    "op, error, expected",
    [
        ("put", PreconditionFailed("version does not match"), Conflict),
        ("put", StoreFull("disk full; raise map_size"), LimitExceeded),
        ("put", StoreUnavailable("S3 is unreachable"), Unavailable),
        ("put", StoreError("S3 request failed (400)"), Unavailable),
        ("cas", PreconditionFailed("version does not match"), Conflict),
        ("delete", PreconditionFailed("version does not match"), Conflict),
        ("delete", StoreUnavailable("S3 is unreachable"), Unavailable),
        ("get", StoreUnavailable("S3 is unreachable"), Unavailable),
        ("get", StoreError("S3 request failed (400)"), Unavailable),
        ("list", StoreUnavailable("S3 is unreachable"), Unavailable),
    ],
)
async def test_store_errors_become_domain_errors(storage_for, inline_reads, op, error, expected):
    storage = storage_for(FailingStore(error, inline_reads))
    calls = {
        "put": lambda: storage.put("k", b"v"),
        "cas": lambda: storage.put("k", b"v", if_version="v1"),
        "delete": lambda: storage.delete("k", if_version="v1"),
        "get": lambda: storage.get("k"),
        "list": lambda: storage.list(""),
    }
    with pytest.raises(expected) as err:
        await calls[op]()
    if isinstance(error, (StoreFull, StoreUnavailable)):
        assert str(error) in err.value.message  # the operator's hint survives
    if expected is LimitExceeded:
        assert err.value.limit == "store_capacity"


async def test_a_stale_version_on_a_real_store_is_a_conflict(storage_for):
    storage = storage_for(MemoryStore())
    stale = await storage.put("k", b"one")
    await storage.put("k", b"two")
    with pytest.raises(Conflict):
        await storage.put("k", b"three", if_version=stale)
    with pytest.raises(Conflict):
        await storage.delete("k", if_version=stale)
    assert (await storage.get("k")).value == b"two"


# -- observing store calls ------------------------------------------------------------------
class RecordingObserver:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None]] = []

    def store_op(self, backend, op, seconds, error_kind):
        assert seconds >= 0
        self.calls.append((backend, op, error_kind))


async def test_every_store_call_is_reported_to_the_observer(storage_for):
    observer = RecordingObserver()
    storage = storage_for(LimitedStore({LIST, DELETE, CAS}), observer=observer)
    version = await storage.put("k", b"v")
    await storage.get("k")
    await storage.list("")
    with pytest.raises(Conflict):
        await storage.put("k", b"w", if_version=version + "stale")
    await storage.delete("k")
    assert observer.calls == [
        ("limited", "put", None),
        ("limited", "get", None),
        ("limited", "list", None),
        ("limited", "put", None),  # a lost race is an answer, not a store failure
        ("limited", "delete", None),
    ]


@pytest.mark.parametrize(
    "error, kind",
    [
        (StoreFull("full"), "full"),
        (StoreUnavailable("down"), "unavailable"),
        (StoreError("odd"), "error"),
    ],
)
async def test_store_failures_reach_the_observer_by_kind(storage_for, error, kind):
    observer = RecordingObserver()
    storage = storage_for(FailingStore(error, inline_reads=False), observer=observer)
    with pytest.raises((LimitExceeded, Unavailable)):
        await storage.put("k", b"v")
    with pytest.raises(Unavailable if kind != "full" else LimitExceeded):
        await storage.get("k")
    assert observer.calls == [("failing", "put", kind), ("failing", "get", kind)]


async def test_the_prometheus_observer_keeps_the_store_metric_names(storage_for):
    from prometheus_client import REGISTRY

    from ctxd_sidecar.server import metrics

    def sample(name, **labels):
        return REGISTRY.get_sample_value(name, labels) or 0

    failing = FailingStore(StoreUnavailable("down"), inline_reads=False)
    failing.name = "failing-prom"
    storage = storage_for(failing, observer=metrics.PrometheusObserver())
    with pytest.raises(Unavailable):
        await storage.put("k", b"v")
    with pytest.raises(Unavailable):
        await storage.get("k")
    for op in ("put", "get"):  # each operation keeps its own series
        labels = {"backend": "failing-prom", "op": op}
        assert sample("ctxd_store_operation_seconds_count", **labels) == 1
        assert sample("ctxd_store_errors_total", **labels, kind="unavailable") == 1


# -- declaring capabilities ----------------------------------------------------------------
def test_call_style_is_read_apart_from_capabilities():
    """What a store can do (capabilities) and how it likes to be called
    (call style) are two declarations; the sidecar reads each for its own."""

    class InlineReads(MemoryStore):
        call_style = frozenset({CallStyle.INLINE_READS})

    class Threaded(MemoryStore):
        call_style = frozenset()

    storage = Storage(InlineReads())
    assert storage.inline_reads and not storage._awaited
    assert storage.capabilities == frozenset({LIST, DELETE, CAS})
    assert not Storage(Threaded()).inline_reads
    assert not Storage(LimitedStore({LIST})).inline_reads
    assert LmdbStore.call_style == {CallStyle.INLINE_READS}
    assert not set(LmdbStore.capabilities) & set(CallStyle)


async def test_async_writes_are_awaited_on_the_stores_own_thread(tmp_path, storage_for):
    store = LmdbStore(str(tmp_path / "lmdb"), map_size=64 << 20)
    storage = storage_for(store)
    assert storage.inline_reads and storage._awaited
    version = await storage.put("k", b"v")
    assert (await storage.get("k")).version == version
    await storage.delete("k", if_version=version)
    assert await storage.get("k") is None


def test_store_hooks_serve_one_scheme_through_pluggy():
    import pluggy

    from ctxd_sidecar.plugin import StoreOptions, store_hooks
    from ctxd_sidecar.plugin import spec as hookspecs

    class MineOptions(StoreOptions):
        a: int = 0

    opened = []

    def factory(uri, options):
        opened.append((uri, options.model_dump()))
        return MemoryStore()

    hooks = store_hooks("Mine", factory, MineOptions)
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(hooks, name="mine")
    assert pm.hook.ctxd_store_schemes() == [["mine"]]
    assert pm.hook.ctxd_open_store(scheme="other", uri="other://x", options={}) is None
    store = pm.hook.ctxd_open_store(scheme="mine", uri="mine://x?a=1", options={"a": "1"})
    assert isinstance(store, MemoryStore)
    assert opened == [("mine://x?a=1", {"a": 1})]
    with pytest.raises(ValueError, match=r"^unknown mine store option 'b' \(known options: a\)$"):
        pm.hook.ctxd_open_store(scheme="mine", uri="mine://x?b=1", options={"b": "1"})
    with pytest.raises(ValueError, match=r"^mine store option a='x' must be a whole number$"):
        pm.hook.ctxd_open_store(scheme="mine", uri="mine://x?a=x", options={"a": "x"})
    assert len(opened) == 1


# -- writes the store schedules (AsyncStore) ---------------------------------------------
def _always() -> bool:
    return True


async def test_lmdb_commits_inline_only_while_the_loop_is_idle(tmp_path, storage_for):
    """LMDB, an AsyncStore, commits a write on the event loop while the
    ``idle`` the sidecar bound says nothing else waits, and queues it to its
    writer thread otherwise (and by default, before a server says anything)."""
    store = LmdbStore(str(tmp_path / "lmdb"), map_size=64 << 20)
    storage = storage_for(store)
    store.inline.budget = float("inf")  # a loaded disk must not pause them here
    first = await storage.put("k", b"queued")
    assert store.inline.commits == 0
    store.bind(_always)
    second = await storage.put("k", b"inline", if_version=first)
    with pytest.raises(Conflict):  # a stale precondition, inline as queued
        await storage.put("k", b"lost", if_version=first)
    await storage.delete("k", if_version=second)
    assert store.inline.commits == 3
    store.bind(lambda: False)
    await storage.put("k", b"queued again", if_absent=True)
    assert store.inline.commits == 3
    assert (await storage.get("k")).value == b"queued again"


async def test_storage_binds_idle_and_awaits_an_async_store(storage_for):
    """The door: Storage hands an AsyncStore its ``idle`` once and awaits its
    aput/adelete on the loop; a plain Store's writes go to worker threads."""

    class Awaited(AsyncStore, MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, bool]] = []
            self.idle = None

        def bind(self, idle):
            self.idle = idle

        async def aput(self, key, value, *, if_version=None, if_absent=False):
            self.calls.append(("aput", threading.current_thread() is threading.main_thread()))
            return self.put(key, value, if_version=if_version, if_absent=if_absent)

        async def adelete(self, key, *, if_version=None):
            self.calls.append(("adelete", threading.current_thread() is threading.main_thread()))
            self.delete(key, if_version=if_version)

    store = Awaited()
    storage = storage_for(store, idle=_always)
    assert store.idle is _always
    version = await storage.put("k", b"v")
    assert (await storage.get("k")).version == version
    await storage.delete("k")
    assert store.calls == [("aput", True), ("adelete", True)]
    assert not storage_for(LimitedStore({LIST, DELETE, CAS}))._awaited


async def test_slow_inline_writes_pause_until_the_pause_ends(tmp_path, storage_for):
    """A disk slower than the budget would stall calls arriving during a
    commit: inline writes stop for a while, then are tried again."""
    store = LmdbStore(str(tmp_path / "lmdb"), map_size=64 << 20)
    storage = storage_for(store, idle=_always)
    store.inline.budget = 0.0  # every commit is "slow"
    store.inline.pause = 0.2
    await storage.put("a", b"1")
    await storage.put("b", b"2")
    assert store.inline.commits == 1
    await asyncio.sleep(0.25)
    await storage.put("c", b"3")
    assert store.inline.commits == 2


# -- LMDB failure modes ---------------------------------------------------------------------
@pytest.mark.parametrize("idle", [False, True], ids=["queued", "inline"])
async def test_lmdb_map_full_is_a_clear_limit_and_the_store_keeps_working(
    tmp_path, storage_for, idle
):
    storage = storage_for(
        open_store(f"lmdb://{tmp_path / 'tiny'}?map_size=1MiB"), idle=lambda: idle
    )
    await storage.put("small", b"kept")
    with pytest.raises(LimitExceeded) as err:
        await storage.put("big", b"\x01" * (2 << 20))
    assert err.value.limit == "store_capacity"
    assert "map_size" in err.value.message
    assert str(tmp_path) not in err.value.message
    assert await storage.get("big") is None
    assert (await storage.get("small")).value == b"kept"
    await storage.put("small2", b"still writable")
    assert (await storage.get("small2")).value == b"still writable"


_HOLD_ENV = """
import sys, lmdb
env = lmdb.open(sys.argv[1], map_size=16 << 20)
txn = env.begin() if sys.argv[2] == "read" else None
print("ready", flush=True)
sys.stdin.read()
"""


def _pids_reading(env: lmdb.Environment) -> set[int]:
    return {int(m) for m in re.findall(r"^\s*(\d+)\s", env.readers(), re.MULTILINE)}


def test_lmdb_clears_readers_left_by_a_crashed_process_on_open(tmp_path):
    path = str(tmp_path / "env")
    LmdbStore(path, map_size=16 << 20).close()

    def child(mode: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLD_ENV, path, mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert proc.stdout.readline() == b"ready\n"
        return proc

    # A live process keeps the environment open, so LMDB does not reset its
    # reader table on the next open: only reader_check() clears the slot.
    holder = child("hold")
    try:
        crashed = child("read")
        crashed.send_signal(signal.SIGKILL)
        crashed.wait(10)
        probe = lmdb.open(path, map_size=16 << 20)
        try:
            assert crashed.pid in _pids_reading(probe), "setup: the stale slot should exist"
        finally:
            probe.close()

        store = LmdbStore(path, map_size=16 << 20)
        try:
            assert crashed.pid not in _pids_reading(store.env)
            store.put("k", b"v")
            assert store.get("k").value == b"v"
        finally:
            store.close()
    finally:
        holder.stdin.close()
        holder.wait(10)


# -- S3 endpoint down ------------------------------------------------------------------------
class SilentEndpoint:
    """Accepts TCP connections and never answers; counts the connections."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.server.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                self.held.append(self.server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self.held:
            conn.close()
        self.server.close()


@pytest.fixture
def silent_endpoint():
    endpoint = SilentEndpoint()
    yield endpoint
    endpoint.close()


def _down_store_uri(endpoint: str, **options) -> str:
    uri = s3_uri(endpoint, f"ctxd-{uuid.uuid4().hex[:12]}")
    return uri + "".join(f"&{name}={value}" for name, value in options.items())


@pytest.mark.timeout(60)
async def test_an_s3_endpoint_refusing_connections_is_unavailable(storage_for):
    # free_port() binds and releases a port: nothing listens there.
    uri = _down_store_uri(f"http://127.0.0.1:{free_port()}", connect_timeout=0.5, max_attempts=2)
    storage = storage_for(open_store(uri))
    for call in (storage.put("k", b"v"), storage.get("k"), storage.list(""), storage.delete("k")):
        with pytest.raises(Unavailable) as err:
            await call
        assert "store unavailable" in err.value.message
        assert "127.0.0.1" not in err.value.message


@pytest.mark.timeout(60)
async def test_an_s3_endpoint_that_never_answers_times_out_after_max_attempts(
    silent_endpoint, storage_for
):
    uri = _down_store_uri(silent_endpoint.url, read_timeout=0.3, max_attempts=2)
    storage = storage_for(open_store(uri))  # starts anyway, after its own start-up read
    held = len(silent_endpoint.held)
    with pytest.raises(Unavailable, match="store unavailable"):
        await storage.get("k")
    assert len(silent_endpoint.held) - held == 2  # max_attempts counts the first attempt too
    with pytest.raises(Unavailable, match="store unavailable"):
        await storage.put("k", b"v")


async def test_a_bucket_gone_after_start_is_unavailable_with_a_hint(moto_endpoint, storage_for):
    """A missing bucket is refused at start (test_store_startup_errors); one
    deleted while the sidecar runs makes each call UNAVAILABLE, saying so."""
    bucket = f"ctxd-gone-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    storage = storage_for(open_store(s3_uri(moto_endpoint, bucket)))
    s3.delete_bucket(Bucket=bucket)
    with pytest.raises(Unavailable, match="bucket does not exist"):
        await storage.put("k", b"v")


async def test_s3_storage_round_trip_through_real_http(moto_endpoint, storage_for):
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"ctxd-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    storage = storage_for(open_store(s3_uri(moto_endpoint, bucket)))
    version = await storage.put("memory/k", b"v", if_absent=True)
    assert await storage.get("memory/k") == Item(b"v", version)
    objects = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [obj["Key"] for obj in objects] == ["pfx/ctxd/default/memory/k"]


def test_lmdb_writer_survives_cancelled_callers(tmp_path):
    """A caller cancelled while its write is queued must not break the
    writer thread for everyone else."""
    store = LmdbStore(str(tmp_path / "env"), map_size=64 << 20)
    try:
        futures = [store.queue_put(f"k{i}", b"v") for i in range(200)]
        cancelled = sum(f.cancel() for f in futures[100:])
        for f in futures[:100]:
            f.result(timeout=30)
        assert store.queue_put("after", b"ok").result(timeout=10)  # the writer is alive
        assert store.get("after").value == b"ok"
        assert len(store.list("k")) == 200 - cancelled  # cancelled writes never ran
    finally:
        store.close()


def test_lmdb_writer_drops_writes_cancelled_on_the_loop(tmp_path):
    """A task cancelled while its write waits in the queue: the write never
    runs, and the writer goes on for everyone else."""
    store = LmdbStore(str(tmp_path / "env"), map_size=64 << 20)

    async def scenario() -> int:
        entered, gate = threading.Event(), threading.Event()

        def hold(txn) -> None:  # keeps the writer busy until the gate opens
            entered.set()
            gate.wait(30)

        held = store._submit(hold)
        assert await asyncio.to_thread(entered.wait, 30)
        futures = [store.queue_put(f"k{i}", b"v") for i in range(50)]
        for f in futures[25:]:
            f.cancel()
        gate.set()
        await held
        done = await asyncio.gather(*futures, return_exceptions=True)
        assert all(isinstance(v, str) for v in done[:25])
        await store.queue_put("after", b"ok")
        return len(store.list("k"))

    try:
        assert asyncio.run(scenario()) == 25
        assert store.get("after").value == b"ok"
    finally:
        store.close()


# -- writes awaited together ----------------------------------------------------------
async def test_put_many_writes_every_key_on_every_store(store_uri, storage_for):
    storage = storage_for(open_store(store_uri))
    await storage.put("memory/b", b"old")
    await storage.put_many({"memory/a": b"1", "memory/b": b"2", "memory/c": b"3"})
    got = [await storage.get(f"memory/{k}") for k in "abc"]
    assert [i.value for i in got] == [b"1", b"2", b"3"]


async def test_put_many_then_writes_a_head_after_the_puts_on_every_store(store_uri, storage_for):
    storage = storage_for(open_store(store_uri))
    first = await storage.put("memory/head", b"h1")
    then = Write("memory/head", b"h2", if_version=first)
    version = await storage.put_many({"memory/a": b"1"}, then=then)
    assert await storage.get("memory/head") == Item(b"h2", version)
    assert (await storage.get("memory/a")).value == b"1"
    with pytest.raises(Conflict):
        await storage.put_many({"memory/b": b"2"}, then=then)  # the head moved on
    assert await storage.get("memory/head") == Item(b"h2", version)
    await storage.delete("memory/gone")
    created = await storage.put_many({}, then=Write("memory/gone", b"n", if_absent=True))
    assert await storage.get("memory/gone") == Item(b"n", created)
    with pytest.raises(Conflict):
        await storage.put_many({"memory/c": b"3"}, then=Write("memory/gone", b"x", if_absent=True))
    assert (await storage.get("memory/gone")).value == b"n"


@pytest.mark.parametrize("idle", [True, False], ids=["inline", "queued"])
async def test_lmdb_writes_a_refused_group_not_at_all(tmp_path, storage_for, idle):
    store = LmdbStore(str(tmp_path))
    storage = storage_for(store, idle=lambda: idle)
    head = await storage.put("memory/head", b"h1")
    before = store.inline.commits
    version = await storage.put_many(
        {"memory/seg": b"s1", "memory/copy": b"c1"},
        then=Write("memory/head", b"h2", if_version=head),
    )
    # The segments and the head naming them: one transaction when idle.
    assert store.inline.commits - before == (1 if idle else 0)
    assert await storage.get("memory/head") == Item(b"h2", version)
    with pytest.raises(Conflict):
        await storage.put_many(
            {"memory/seg2": b"s2"}, then=Write("memory/head", b"h3", if_version=head)
        )
    assert await storage.get("memory/seg2") is None
    assert (await storage.get("memory/head")).value == b"h2"


@pytest.mark.parametrize("idle", [True, False], ids=["inline", "queued"])
async def test_lmdb_commits_a_group_of_puts_at_once_when_idle(tmp_path, storage_for, idle):
    store = LmdbStore(str(tmp_path))
    storage = storage_for(store, idle=lambda: idle)
    before = store.inline.commits
    await storage.put_many({f"memory/{i}": str(i).encode() for i in range(5)})
    # Inline: one transaction for the five (not five); queued: the writer's.
    assert store.inline.commits - before == (1 if idle else 0)
    assert [(await storage.get(f"memory/{i}")).value for i in range(5)] == [
        str(i).encode() for i in range(5)
    ]
