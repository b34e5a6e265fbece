"""The shared store conformance suite on every built-in backend."""

from __future__ import annotations

import pytest

from ctxd_plugins.lmdb_store import LmdbStore
from ctxd_plugins.memory_store import MemoryStore
from ctxd_sidecar.plugins import open_store
from ctxd_sidecar.testing.store_conformance import StoreConformance


class TestMemoryStore(StoreConformance):
    persistent = False

    @pytest.fixture
    def make_store(self):
        return MemoryStore


class TestLmdbStore(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path):
        return lambda: LmdbStore(str(tmp_path / "lmdb"), map_size=256 << 20)


class TestS3Store(StoreConformance):
    @pytest.fixture
    def make_store(self, store_uri_for):
        uri = store_uri_for("s3")
        return lambda: open_store(uri)


class TestS3StoreWithoutList(StoreConformance):
    @pytest.fixture
    def make_store(self, store_uri_for):
        uri = store_uri_for("s3-nolist")
        return lambda: open_store(uri)
