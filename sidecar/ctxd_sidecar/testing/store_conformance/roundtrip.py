"""Get and put: values come back byte for byte under any key, and versions
change when content does."""

from __future__ import annotations

import random

import pytest

from ctxd_sidecar.plugin.store import Capability, Item, Store
from ctxd_sidecar.testing.store_conformance.base import (
    AWKWARD_KEYS,
    SEED,
    StoreFixtures,
    declares,
    digest,
    put_many,
)


class RoundTripTests(StoreFixtures):
    def test_get_of_missing_key_returns_none(self, store: Store) -> None:
        assert store.get("never/written") is None

    def test_put_returns_the_version_get_reports(self, store: Store) -> None:
        version = store.put("k", b"value")
        assert isinstance(version, str) and version
        item = store.get("k")
        assert item == Item(b"value", version)
        assert type(item.value) is bytes, "values come back as bytes, not a buffer"

    def test_get_value_is_the_value_get_returns(self, store: Store) -> None:
        store.put("k", b"value")
        assert store.get_value("k") == b"value"
        assert type(store.get_value("k")) is bytes, "values come back as bytes, not a buffer"
        assert store.get_value("never/written") is None

    def test_empty_value_round_trips(self, store: Store) -> None:
        version = store.put("empty", b"")
        assert store.get("empty") == Item(b"", version)

    def test_every_byte_value_round_trips(self, store: Store) -> None:
        value = bytes(range(256)) + bytes(reversed(range(256))) + b"\x00" * 3
        version = store.put("binary", value)
        assert store.get("binary") == Item(value, version)

    def test_large_value_round_trips(self, store: Store) -> None:
        value = random.Random(SEED).randbytes(self.large_value_bytes)
        version = store.put("large", value)
        item = store.get("large")
        assert item is not None
        assert digest(item.value) == digest(value)
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


class KeyTests(StoreFixtures):
    def test_awkward_keys_round_trip_and_stay_distinct(self, store: Store) -> None:
        values = {key: f"value of {key!r}".encode() for key in AWKWARD_KEYS}
        put_many(store, values.items())
        wrong = {}
        for key, value in values.items():
            item = store.get(key)
            if item is None or item.value != value:
                wrong[key] = None if item is None else item.value
        assert not wrong, f"keys that did not round-trip: {wrong}"
        if declares(store, Capability.LIST):
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
        if declares(store, Capability.LIST):
            assert store.list(key[:10]) == [key]
