"""Conditional put (CONDITIONAL_PUT): create-only and compare-and-set, atomic
under races. Skipped, with the reason, on stores not declaring it."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from ctxd_sidecar.plugin.store import Capability, Item, PreconditionFailed, Store
from ctxd_sidecar.testing.store_conformance.base import StoreFixtures, store_declaring


class ConditionalPutTests(StoreFixtures):
    cas_store = store_declaring(Capability.CONDITIONAL_PUT)

    def test_create_only_on_a_new_key_succeeds(self, cas_store: Store) -> None:
        version = cas_store.put("k", b"created", if_absent=True)
        assert cas_store.get("k") == Item(b"created", version)

    def test_create_only_on_an_existing_key_fails(self, cas_store: Store) -> None:
        version = cas_store.put("k", b"existing")
        with pytest.raises(PreconditionFailed):
            cas_store.put("k", b"intruder", if_absent=True)
        assert cas_store.get("k") == Item(b"existing", version)

    def test_create_only_on_an_existing_empty_value_fails(self, cas_store: Store) -> None:
        cas_store.put("k", b"")
        with pytest.raises(PreconditionFailed):
            cas_store.put("k", b"intruder", if_absent=True)
        assert cas_store.get("k").value == b""

    def test_matching_version_replaces_and_returns_a_new_version(self, cas_store: Store) -> None:
        v1 = cas_store.put("k", b"one")
        v2 = cas_store.put("k", b"two", if_version=v1)
        assert v2 != v1
        assert cas_store.get("k") == Item(b"two", v2)
        v3 = cas_store.put("k", b"three", if_version=v2)
        assert cas_store.get("k") == Item(b"three", v3)

    def test_stale_version_fails(self, cas_store: Store) -> None:
        v1 = cas_store.put("k", b"one")
        v2 = cas_store.put("k", b"two")
        with pytest.raises(PreconditionFailed):
            cas_store.put("k", b"lost update", if_version=v1)
        assert cas_store.get("k") == Item(b"two", v2)

    def test_if_version_on_a_missing_key_fails(self, cas_store: Store) -> None:
        version = cas_store.put("elsewhere", b"v")
        with pytest.raises(PreconditionFailed):
            cas_store.put("missing", b"v", if_version=version)
        assert cas_store.get("missing") is None

    def test_racing_create_only_writes_have_exactly_one_winner(self, cas_store: Store) -> None:
        racers = 8
        barrier = threading.Barrier(racers)

        def race(i: int) -> str | None:
            barrier.wait(10)
            try:
                return cas_store.put("race", f"racer {i}".encode(), if_absent=True)
            except PreconditionFailed:
                return None

        with concurrent.futures.ThreadPoolExecutor(racers) as pool:
            results = list(pool.map(race, range(racers)))
        winners = [i for i, version in enumerate(results) if version is not None]
        assert len(winners) == 1, f"create-only winners: {winners}"
        assert cas_store.get("race") == Item(f"racer {winners[0]}".encode(), results[winners[0]])

    def test_compare_and_set_loses_no_update(self, cas_store: Store) -> None:
        cas_store.put("counter", b"0")
        writers, increments = 4, 10

        def increment() -> None:
            for _ in range(increments):
                while True:
                    item = cas_store.get("counter")
                    try:
                        value = b"%d" % (int(item.value) + 1)
                        cas_store.put("counter", value, if_version=item.version)
                        break
                    except PreconditionFailed:
                        continue

        with concurrent.futures.ThreadPoolExecutor(writers) as pool:
            for future in [pool.submit(increment) for _ in range(writers)]:
                future.result()
        assert int(cas_store.get("counter").value) == writers * increments
