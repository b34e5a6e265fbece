"""Write identity (CONDITIONAL_PUT): a conditional write's outcome is known,
never inferred from content. Racing writers may send identical bytes; a
write whose reply was lost (the connection dropped after the request was
sent) must still be answered for what it did: applied exactly once, or
refused and not applied.

The drop checks need a way to lose replies: a networked backend overrides
the ``write_drops`` fixture (see :class:`WriteDrops`); the others skip them.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from ctxd_sidecar.plugin.store import Capability, Item, PreconditionFailed, Store, StoreUnavailable
from ctxd_sidecar.testing.store_conformance.base import SEED, StoreFixtures, require


@dataclass
class WriteDrops:
    """A store whose connection to its backend can fail on purpose."""

    #: Opened through the fault: same data as ``make_store`` opens.
    store: Store
    #: Arm ``n`` faults: each of the next ``n`` writes reaches the backend
    #: (and is applied there, if its precondition holds), then the connection
    #: drops before the reply arrives.
    drop_writes: Callable[[int], None]


def _race(racers: int, write: Callable[[int], str]) -> list[str | None]:
    barrier = threading.Barrier(racers)

    def one(i: int) -> str | None:
        barrier.wait(10)
        try:
            return write(i)
        except PreconditionFailed:
            return None

    with concurrent.futures.ThreadPoolExecutor(racers) as pool:
        return list(pool.map(one, range(racers)))


def _count_up(store: Store, writers: int, increments: int, before: Callable[[], None]) -> int:
    """Writers increment one counter by compare-and-set, every one writing
    the same bytes for the same next value; returns the acknowledged count."""
    acked = 0
    lock = threading.Lock()

    def increment() -> None:
        nonlocal acked
        for _ in range(increments):
            while True:
                item = store.get("counter")
                before()
                try:
                    store.put("counter", b"%d" % (int(item.value) + 1), if_version=item.version)
                except (PreconditionFailed, StoreUnavailable):
                    continue  # refused (or not acknowledged): read again and retry
                with lock:
                    acked += 1
                break

    with concurrent.futures.ThreadPoolExecutor(writers) as pool:
        for future in [pool.submit(increment) for _ in range(writers)]:
            future.result()
    return acked


class WriteIdentityTests(StoreFixtures):
    @pytest.fixture
    def write_drops(self, store: Store) -> WriteDrops:
        """Override for a backend reached over a connection; skipped otherwise."""
        pytest.skip(f"{type(self).__name__} has no connection whose replies can be dropped")

    @pytest.fixture
    def identity_store(self, store: Store) -> Store:
        require(store, Capability.CONDITIONAL_PUT)
        return store

    def test_identical_values_racing_from_one_version_have_one_winner(
        self, identity_store: Store
    ) -> None:
        base = identity_store.put("k", b"base")
        results = _race(8, lambda i: identity_store.put("k", b"same", if_version=base))
        winners = [v for v in results if v is not None]
        assert len(winners) == 1, f"{len(winners)} writers acknowledged replacing one version"
        assert identity_store.get("k") == Item(b"same", winners[0])

    def test_identical_values_racing_to_create_have_one_winner(self, identity_store: Store) -> None:
        results = _race(8, lambda i: identity_store.put("k", b"same", if_absent=True))
        assert sum(v is not None for v in results) == 1

    def test_identical_increments_count_every_acknowledged_write(
        self, identity_store: Store
    ) -> None:
        identity_store.put("counter", b"0")
        acked = _count_up(identity_store, 8, 10, lambda: None)
        assert acked == 80
        assert int(identity_store.get("counter").value) == acked

    def test_a_write_whose_reply_was_lost_is_answered_by_what_it_did(
        self, write_drops: WriteDrops
    ) -> None:
        store, drop = write_drops.store, write_drops.drop_writes
        require(store, Capability.CONDITIONAL_PUT)
        drop(1)
        created = store.put("k", b"v", if_absent=True)
        assert store.get("k") == Item(b"v", created)
        drop(1)
        replaced = store.put("k", b"v", if_version=created)  # identical bytes, a new write
        assert store.get("k").value == b"v"
        drop(1)
        with pytest.raises(PreconditionFailed):
            store.put("k", b"v", if_absent=True)  # identical bytes, someone else's
        drop(1)
        with pytest.raises(PreconditionFailed):
            store.put("k", b"w", if_version="stale-version")
        assert store.get("k").value == b"v"
        assert store.get("k").version == replaced

    def test_identical_increments_under_dropped_replies_lose_nothing(
        self, write_drops: WriteDrops
    ) -> None:
        store = write_drops.store
        require(store, Capability.CONDITIONAL_PUT)
        store.put("counter", b"0")
        rng = random.Random(SEED)
        acked = _count_up(
            store, 8, 8, lambda: write_drops.drop_writes(1) if rng.random() < 0.25 else None
        )
        assert int(store.get("counter").value) == acked == 64
