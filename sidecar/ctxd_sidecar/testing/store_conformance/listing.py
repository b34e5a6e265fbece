"""Listing (LIST): keys by literal prefix in byte order, exclusive
``start_after``, ``limit``, across pages. Skipped, with the reason, on stores
not declaring it (the sidecar keeps its own index for those)."""

from __future__ import annotations

import random

import pytest

from ctxd_sidecar.plugin.store import Capability, Store
from ctxd_sidecar.testing.store_conformance.base import (
    SEED,
    StoreFixtures,
    put_many,
    require,
    store_declaring,
)


class ListTests(StoreFixtures):
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

    listing_store = store_declaring(Capability.LIST)

    @pytest.fixture
    def listed(self, listing_store: Store) -> Store:
        """A listing store holding :attr:`LISTED`."""
        put_many(listing_store, ((key, key.encode()) for key in self.LISTED))
        return listing_store

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

    def test_list_sees_a_key_right_after_it_is_written(self, listing_store: Store) -> None:
        listing_store.put("fresh/1", b"")
        assert listing_store.list("fresh/") == ["fresh/1"]
        listing_store.put("fresh/0", b"")
        assert listing_store.list("fresh/") == ["fresh/0", "fresh/1"]

    def test_list_spans_more_than_one_page_of_results(self, listing_store: Store) -> None:
        store = listing_store
        keys = [f"many/{i:05d}" for i in range(self.many_keys)]
        shuffled = keys[:]
        random.Random(SEED).shuffle(shuffled)
        put_many(store, ((key, b"") for key in [*shuffled, "man", "many", "manz/0"]))
        assert store.list("many/") == keys
        assert store.list("many/", limit=self.many_keys - 5) == keys[:-5]
        assert store.list("many/", start_after=keys[4]) == keys[5:]
        assert store.list("many/", start_after=keys[1], limit=self.many_keys - 4) == keys[2:-2]
        assert store.list("many") == ["many", *keys]
