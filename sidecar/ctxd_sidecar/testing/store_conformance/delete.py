"""Delete (DELETE), plain and conditional. Skipped, with the reason, on
stores not declaring it (the sidecar writes tombstones for those)."""

from __future__ import annotations

import pytest

from ctxd_sidecar.plugin.store import Capability, Item, PreconditionFailed, Store
from ctxd_sidecar.testing.store_conformance.base import StoreFixtures, store_declaring


class DeleteTests(StoreFixtures):
    deleting_store = store_declaring(Capability.DELETE)
    #: For ``delete(if_version=…)``.
    cas_deleting_store = store_declaring(Capability.DELETE, Capability.CONDITIONAL_PUT)

    def test_delete_removes_the_key(self, deleting_store: Store) -> None:
        deleting_store.put("k", b"v")
        deleting_store.put("k2", b"kept")
        deleting_store.delete("k")
        assert deleting_store.get("k") is None
        assert deleting_store.get("k2").value == b"kept"

    def test_delete_of_a_missing_key_is_not_an_error(self, deleting_store: Store) -> None:
        deleting_store.delete("never/written")
        assert deleting_store.get("never/written") is None

    def test_put_after_delete_starts_afresh(self, deleting_store: Store) -> None:
        deleting_store.put("k", b"old")
        deleting_store.delete("k")
        version = deleting_store.put("k", b"new")
        assert deleting_store.get("k") == Item(b"new", version)

    def test_create_only_after_delete_succeeds(self, cas_deleting_store: Store) -> None:
        store = cas_deleting_store
        store.put("k", b"old")
        store.delete("k")
        version = store.put("k", b"new", if_absent=True)
        assert store.get("k") == Item(b"new", version)

    def test_delete_with_matching_version_removes(self, cas_deleting_store: Store) -> None:
        store = cas_deleting_store
        version = store.put("k", b"v")
        store.delete("k", if_version=version)
        assert store.get("k") is None

    def test_delete_with_stale_version_fails(self, cas_deleting_store: Store) -> None:
        store = cas_deleting_store
        stale = store.put("k", b"one")
        current = store.put("k", b"two")
        with pytest.raises(PreconditionFailed):
            store.delete("k", if_version=stale)
        assert store.get("k") == Item(b"two", current)

    def test_delete_with_version_of_a_missing_key_fails(self, cas_deleting_store: Store) -> None:
        store = cas_deleting_store
        version = store.put("k", b"v")
        store.delete("k")
        with pytest.raises(PreconditionFailed):
            store.delete("k", if_version=version)
