"""The conformance suite every ctxd store backend must pass.

ctxd relies on a small contract (:mod:`sidecar.store`): values round-trip
byte for byte, any non-empty UTF-8 key works, versions change when content
changes, and each capability a store declares holds exactly as documented,
while one it does not declare is refused with :class:`NotImplementedError`
rather than half-done. This module checks all of that with plain pytest
tests that a backend runs by subclassing :class:`StoreConformance` and
overriding one fixture, ``make_store``::

    # tests/test_conformance.py of a plugin package
    import pytest
    from sidecar.testing.store_conformance import StoreConformance
    from ctxd_dirstore import DirStore

    class TestDirStore(StoreConformance):
        @pytest.fixture
        def make_store(self, tmp_path):
            return lambda: DirStore(tmp_path / "data")

``make_store`` returns a factory: every call opens the backend at the same
place (same directory, bucket, …), so the suite can close a store and open
it again. The fixture may use any other fixture (a server, a bucket); a
factory going through the plugin's URI tests the registration too::

    from sidecar.plugins import open_store

    @pytest.fixture
    def make_store(self, tmp_path):
        return lambda: open_store(f"dir://{tmp_path}")

Tests for a capability the store does not declare are skipped (the report
says which); ``test_capability_is_honoured_or_refused`` checks both sides of
every capability. Class attributes tune the suite: set ``persistent = False``
for a store whose data does not survive ``close()`` (like ``memory://``), and
lower ``large_value_bytes`` or ``many_keys`` only if the backend documents a
smaller limit. Run with ``pytest -v`` to see every check by name.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import random
import threading
from collections.abc import Callable, Iterable, Iterator

import pytest

from sidecar.store import Capability, Item, PreconditionFailed, Store

#: Keys that trip up URL encoding, file systems and naive escaping. Every one
#: must round-trip and stay distinct from all others (``Key``/``key`` too).
AWKWARD_KEYS = (
    "plain",
    "with space",
    "a key",
    "a+key",
    "a%20key",
    "100%",
    "percent%2Fslash",
    "query?x=1&y=2",
    "hash#fragment",
    "amp&ersand",
    "semi;colon,comma=equals",
    "star*and[brackets]",
    "quote\"apostrophe'",
    "<angle>",
    "back\\slash",
    "~tilde",
    "Key",
    "key",
    "ünïcödé",
    "日本語/キー",
    "emoji 🧠🔥",
    "zwj 👩\u200d💻",
    "combining e\u0301",
    "precomposed \u00e9",
    "slash/inside",
    "trailing/",
    "/leading",
    "double//slash",
    "a/../b",
    "./dot",
    "..",
    ".",
    "-dash",
    "tab\tinside",
)

_SEED = 20240601


def require(store: Store, *caps: Capability) -> None:
    """Skip the calling test unless ``store`` declares every one of ``caps``."""
    missing = [cap.name for cap in caps if cap not in store.capabilities]
    if missing:
        pytest.skip(f"{store.name} does not declare {', '.join(missing)}")


def put_many(store: Store, items: Iterable[tuple[str, bytes]], workers: int = 16) -> None:
    """Write many keys concurrently (backends are called from worker threads)."""
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(store.put, key, value) for key, value in items]:
            future.result()


def _digest(data: bytes) -> str:
    return f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}"


class StoreConformance:
    """Subclass as ``Test<YourStore>`` and override :meth:`make_store`."""

    #: Data written and flushed survives ``close()`` and a fresh open.
    persistent: bool = True
    #: Size of the large-value round trip.
    large_value_bytes: int = 5 << 20
    #: Keys written for the listing that must span more than one S3 page (1000).
    many_keys: int = 1010

    # -- fixtures -----------------------------------------------------------
    @pytest.fixture
    def make_store(self) -> Callable[[], Store]:
        """Override: return a factory opening the backend under test; every
        call opens the same underlying data, empty at the start of a test."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the make_store fixture "
            "(see sidecar.testing.store_conformance)"
        )

    @pytest.fixture
    def store(self, make_store: Callable[[], Store]) -> Iterator[Store]:
        """A freshly opened store, closed after the test."""
        opened = make_store()
        try:
            yield opened
        finally:
            opened.close()

    # -- the interface itself -------------------------------------------------
    def test_declares_capabilities_and_key_limit_properly(self, store: Store) -> None:
        assert isinstance(store.capabilities, frozenset)
        assert all(isinstance(cap, Capability) for cap in store.capabilities)
        limit = store.max_key_bytes
        assert limit is None or (isinstance(limit, int) and limit >= 64), (
            f"max_key_bytes must be None or a usable number of bytes, not {limit!r}"
        )
        assert isinstance(store.name, str) and store.name
        assert isinstance(store.describe(), str) and store.describe()

    @pytest.mark.parametrize("capability", list(Capability), ids=lambda c: c.value)
    def test_capability_is_honoured_or_refused(self, store: Store, capability: Capability) -> None:
        """A declared capability works; an undeclared one raises
        NotImplementedError and leaves the data alone (never a silent no-op)."""
        version = store.put("cap/key", b"original")
        declared = capability in store.capabilities
        if capability is Capability.LIST:
            if declared:
                assert store.list("cap/") == ["cap/key"]
            else:
                with pytest.raises(NotImplementedError):
                    store.list("cap/")
        elif capability is Capability.SHARED:
            # A statement about deployment, not an operation: replicas on one
            # backend need compare-and-set that holds across processes.
            if declared:
                assert Capability.CONDITIONAL_PUT in store.capabilities
        elif capability is Capability.DELETE:
            if declared:
                store.delete("cap/key")
                assert store.get("cap/key") is None
            else:
                with pytest.raises(NotImplementedError):
                    store.delete("cap/key")
                assert store.get("cap/key") == Item(b"original", version)
        else:
            attempts: list[Callable[[], object]] = [
                lambda: store.put("cap/key", b"changed", if_version=version),
                lambda: store.put("cap/new", b"changed", if_absent=True),
            ]
            if Capability.DELETE in store.capabilities:
                attempts.append(lambda: store.delete("cap/key", if_version=version))
            if declared:
                new_version = store.put("cap/key", b"changed", if_version=version)
                assert store.get("cap/key") == Item(b"changed", new_version)
                assert store.put("cap/new", b"fresh", if_absent=True)
            else:
                for attempt in attempts:
                    with pytest.raises(NotImplementedError):
                        attempt()
                assert store.get("cap/key") == Item(b"original", version)
                assert store.get("cap/new") is None

    # -- values -------------------------------------------------------------------
    def test_get_of_missing_key_returns_none(self, store: Store) -> None:
        assert store.get("never/written") is None

    def test_put_returns_the_version_get_reports(self, store: Store) -> None:
        version = store.put("k", b"value")
        assert isinstance(version, str) and version
        item = store.get("k")
        assert item == Item(b"value", version)
        assert type(item.value) is bytes, "values come back as bytes, not a buffer"

    def test_empty_value_round_trips(self, store: Store) -> None:
        version = store.put("empty", b"")
        assert store.get("empty") == Item(b"", version)

    def test_every_byte_value_round_trips(self, store: Store) -> None:
        value = bytes(range(256)) + bytes(reversed(range(256))) + b"\x00" * 3
        version = store.put("binary", value)
        assert store.get("binary") == Item(value, version)

    def test_large_value_round_trips(self, store: Store) -> None:
        value = random.Random(_SEED).randbytes(self.large_value_bytes)
        version = store.put("large", value)
        item = store.get("large")
        assert item is not None
        assert _digest(item.value) == _digest(value)
        assert item.version == version

    def test_overwrite_replaces_the_value(self, store: Store) -> None:
        store.put("k", b"first")
        version = store.put("k", b"second")
        assert store.get("k") == Item(b"second", version)

    def test_version_changes_when_content_changes(self, store: Store) -> None:
        v1 = store.put("k", b"one")
        v2 = store.put("k", b"two")
        assert v1 != v2
        assert store.get("k").version == v2
        v3 = store.put("k", b"one")
        assert v3 != v2

    # -- keys -----------------------------------------------------------------------
    def test_awkward_keys_round_trip_and_stay_distinct(self, store: Store) -> None:
        values = {key: f"value of {key!r}".encode() for key in AWKWARD_KEYS}
        put_many(store, values.items())
        wrong = {}
        for key, value in values.items():
            item = store.get(key)
            if item is None or item.value != value:
                wrong[key] = None if item is None else item.value
        assert not wrong, f"keys that did not round-trip: {wrong}"
        if Capability.LIST in store.capabilities:
            assert store.list("") == sorted(AWKWARD_KEYS)

    @pytest.mark.parametrize("unit", ["k", "é", "🧠"], ids=["ascii", "2-byte", "4-byte"])
    def test_key_of_the_longest_declared_length_round_trips(self, store: Store, unit: str) -> None:
        limit = store.max_key_bytes or 1024
        width = len(unit.encode())
        key = unit * (limit // width) + "k" * (limit % width)
        assert len(key.encode()) == limit
        version = store.put(key, b"long key")
        assert store.get(key) == Item(b"long key", version)
        assert store.get(key[:-1]) is None
        if Capability.LIST in store.capabilities:
            assert store.list(key[:10]) == [key]

    # -- conditional writes --------------------------------------------------------------
    def test_create_only_on_a_new_key_succeeds(self, store: Store) -> None:
        require(store, Capability.CONDITIONAL_PUT)
        version = store.put("k", b"created", if_absent=True)
        assert store.get("k") == Item(b"created", version)

    def test_create_only_on_an_existing_key_fails(self, store: Store) -> None:
        require(store, Capability.CONDITIONAL_PUT)
        version = store.put("k", b"existing")
        with pytest.raises(PreconditionFailed):
            store.put("k", b"intruder", if_absent=True)
        assert store.get("k") == Item(b"existing", version)

    def test_create_only_on_an_existing_empty_value_fails(self, store: Store) -> None:
        require(store, Capability.CONDITIONAL_PUT)
        store.put("k", b"")
        with pytest.raises(PreconditionFailed):
            store.put("k", b"intruder", if_absent=True)
        assert store.get("k").value == b""

    def test_matching_version_replaces_and_returns_a_new_version(self, store: Store) -> None:
        require(store, Capability.CONDITIONAL_PUT)
        v1 = store.put("k", b"one")
        v2 = store.put("k", b"two", if_version=v1)
        assert v2 != v1
        assert store.get("k") == Item(b"two", v2)
        v3 = store.put("k", b"three", if_version=v2)
        assert store.get("k") == Item(b"three", v3)

    def test_stale_version_fails(self, store: Store) -> None:
        require(store, Capability.CONDITIONAL_PUT)
        v1 = store.put("k", b"one")
        v2 = store.put("k", b"two")
        with pytest.raises(PreconditionFailed):
            store.put("k", b"lost update", if_version=v1)
        assert store.get("k") == Item(b"two", v2)

    def test_if_version_on_a_missing_key_fails(self, store: Store) -> None:
        require(store, Capability.CONDITIONAL_PUT)
        version = store.put("elsewhere", b"v")
        with pytest.raises(PreconditionFailed):
            store.put("missing", b"v", if_version=version)
        assert store.get("missing") is None

    def test_racing_create_only_writes_have_exactly_one_winner(self, store: Store) -> None:
        require(store, Capability.CONDITIONAL_PUT)
        racers = 8
        barrier = threading.Barrier(racers)

        def race(i: int) -> str | None:
            barrier.wait(10)
            try:
                return store.put("race", f"racer {i}".encode(), if_absent=True)
            except PreconditionFailed:
                return None

        with concurrent.futures.ThreadPoolExecutor(racers) as pool:
            results = list(pool.map(race, range(racers)))
        winners = [i for i, version in enumerate(results) if version is not None]
        assert len(winners) == 1, f"create-only winners: {winners}"
        assert store.get("race") == Item(f"racer {winners[0]}".encode(), results[winners[0]])

    def test_compare_and_set_loses_no_update(self, store: Store) -> None:
        require(store, Capability.CONDITIONAL_PUT)
        store.put("counter", b"0")
        writers, increments = 4, 10

        def increment() -> None:
            for _ in range(increments):
                while True:
                    item = store.get("counter")
                    try:
                        store.put("counter", b"%d" % (int(item.value) + 1), if_version=item.version)
                        break
                    except PreconditionFailed:
                        continue

        with concurrent.futures.ThreadPoolExecutor(writers) as pool:
            for future in [pool.submit(increment) for _ in range(writers)]:
                future.result()
        assert int(store.get("counter").value) == writers * increments

    # -- delete ------------------------------------------------------------------------------
    def test_delete_removes_the_key(self, store: Store) -> None:
        require(store, Capability.DELETE)
        store.put("k", b"v")
        store.put("k2", b"kept")
        store.delete("k")
        assert store.get("k") is None
        assert store.get("k2").value == b"kept"

    def test_delete_of_a_missing_key_is_not_an_error(self, store: Store) -> None:
        require(store, Capability.DELETE)
        store.delete("never/written")
        assert store.get("never/written") is None

    def test_put_after_delete_starts_afresh(self, store: Store) -> None:
        require(store, Capability.DELETE)
        store.put("k", b"old")
        store.delete("k")
        version = store.put("k", b"new")
        assert store.get("k") == Item(b"new", version)

    def test_create_only_after_delete_succeeds(self, store: Store) -> None:
        require(store, Capability.DELETE, Capability.CONDITIONAL_PUT)
        store.put("k", b"old")
        store.delete("k")
        version = store.put("k", b"new", if_absent=True)
        assert store.get("k") == Item(b"new", version)

    def test_delete_with_matching_version_removes(self, store: Store) -> None:
        require(store, Capability.DELETE, Capability.CONDITIONAL_PUT)
        version = store.put("k", b"v")
        store.delete("k", if_version=version)
        assert store.get("k") is None

    def test_delete_with_stale_version_fails(self, store: Store) -> None:
        require(store, Capability.DELETE, Capability.CONDITIONAL_PUT)
        stale = store.put("k", b"one")
        current = store.put("k", b"two")
        with pytest.raises(PreconditionFailed):
            store.delete("k", if_version=stale)
        assert store.get("k") == Item(b"two", current)

    def test_delete_with_version_of_a_missing_key_fails(self, store: Store) -> None:
        require(store, Capability.DELETE, Capability.CONDITIONAL_PUT)
        version = store.put("k", b"v")
        store.delete("k")
        with pytest.raises(PreconditionFailed):
            store.delete("k", if_version=version)

    # -- list ----------------------------------------------------------------------------------
    LISTED = (
        "a",
        "a/1",
        "a/10",
        "a/2",
        "a/b/c",
        "a.b",
        "a_b",
        "ab",
        "b",
        "b/1",
        "z/\uff5e",  # FULLWIDTH TILDE: sorts before the emoji by code point,
        "z/😀",  # after it in UTF-16 (a classic ordering bug)
        "z/é",
    )

    @pytest.fixture
    def listed(self, store: Store) -> Store:
        require(store, Capability.LIST)
        put_many(store, ((key, key.encode()) for key in self.LISTED))
        return store

    def test_list_returns_keys_under_prefix_in_byte_order(self, listed: Store) -> None:
        assert listed.list("a/") == ["a/1", "a/10", "a/2", "a/b/c"]
        assert listed.list("a") == ["a", "a.b", "a/1", "a/10", "a/2", "a/b/c", "a_b", "ab"]
        assert listed.list("z/") == ["z/é", "z/\uff5e", "z/😀"]
        everything = listed.list("")
        assert everything == sorted(self.LISTED, key=str.encode)
        assert everything == sorted(self.LISTED)

    def test_list_prefix_is_literal(self, listed: Store) -> None:
        listed.put("x%", b"")
        listed.put("x_", b"")
        listed.put("x*", b"")
        assert listed.list("a_") == ["a_b"]
        assert listed.list("a.") == ["a.b"]
        assert listed.list("x%") == ["x%"]
        assert listed.list("x*") == ["x*"]
        assert listed.list("nothing/") == []
        assert listed.list("a/1/") == []

    def test_list_start_after_is_exclusive(self, listed: Store) -> None:
        assert listed.list("a/", start_after="a/10") == ["a/2", "a/b/c"]
        assert listed.list("a/", start_after="a/11") == ["a/2", "a/b/c"]  # need not exist
        assert listed.list("a/", start_after="a/b/c") == []
        assert listed.list("a/", start_after="zzz") == []
        assert listed.list("a/", start_after="0") == ["a/1", "a/10", "a/2", "a/b/c"]
        assert listed.list("", start_after="b") == ["b/1", "z/é", "z/\uff5e", "z/😀"]

    def test_list_start_after_equal_to_prefix_skips_that_key(self, listed: Store) -> None:
        under_a = ["a.b", "a/1", "a/10", "a/2", "a/b/c", "a_b", "ab"]
        assert listed.list("a", start_after="a") == under_a
        assert listed.list("a/", start_after="a/") == ["a/1", "a/10", "a/2", "a/b/c"]

    def test_list_limit(self, listed: Store) -> None:
        assert listed.list("a/", limit=2) == ["a/1", "a/10"]
        assert listed.list("a/", limit=1, start_after="a/1") == ["a/10"]
        assert listed.list("a/", limit=100) == ["a/1", "a/10", "a/2", "a/b/c"]
        assert listed.list("a/", limit=0) == []

    def test_list_pages_cover_every_key_once(self, listed: Store) -> None:
        pages, after = [], ""
        while page := listed.list("", start_after=after, limit=3):
            assert len(page) <= 3
            pages.append(page)
            after = page[-1]
        assert [key for page in pages for key in page] == listed.list("")
        assert len(pages) == -(-len(self.LISTED) // 3)

    def test_list_leaves_out_deleted_keys(self, listed: Store) -> None:
        require(listed, Capability.DELETE)
        listed.delete("a/10")
        listed.delete("a")
        assert listed.list("a") == ["a.b", "a/1", "a/2", "a/b/c", "a_b", "ab"]

    def test_list_sees_a_key_right_after_it_is_written(self, store: Store) -> None:
        require(store, Capability.LIST)
        store.put("fresh/1", b"")
        assert store.list("fresh/") == ["fresh/1"]
        store.put("fresh/0", b"")
        assert store.list("fresh/") == ["fresh/0", "fresh/1"]

    def test_list_spans_more_than_one_page_of_results(self, store: Store) -> None:
        require(store, Capability.LIST)
        keys = [f"many/{i:05d}" for i in range(self.many_keys)]
        shuffled = keys[:]
        random.Random(_SEED).shuffle(shuffled)
        put_many(store, ((key, b"") for key in [*shuffled, "man", "many", "manz/0"]))
        assert store.list("many/") == keys
        assert store.list("many/", limit=self.many_keys - 5) == keys[:-5]
        assert store.list("many/", start_after=keys[4]) == keys[5:]
        assert store.list("many/", start_after=keys[1], limit=self.many_keys - 4) == keys[2:-2]
        assert store.list("many") == ["many", *keys]

    # -- concurrency and lifecycle --------------------------------------------------------------
    def test_concurrent_writes_to_distinct_keys_all_land(self, store: Store) -> None:
        items = [(f"conc/{i}", f"value {i}".encode()) for i in range(100)]
        put_many(store, items)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            got = list(pool.map(store.get, [key for key, _ in items]))
        assert [item.value if item else None for item in got] == [value for _, value in items]

    def test_async_writes_behave_like_put_and_delete(self, store: Store) -> None:
        if not store.async_writes:
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
            if Capability.DELETE in first.capabilities:
                first.delete("gone")
            first.flush()
        finally:
            first.close()
        second = make_store()
        try:
            assert second.get("durable") == Item(b"kept", version)
            if Capability.DELETE in second.capabilities:
                assert second.get("gone") is None
            if Capability.LIST in second.capabilities:
                assert "durable" in second.list("")
        finally:
            second.close()
