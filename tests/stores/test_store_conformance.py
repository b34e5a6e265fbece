"""The shared store conformance suite on every built-in backend."""

from __future__ import annotations

import pytest

from ctxd_plugins.lmdb_store import LmdbStore
from ctxd_plugins.memory_store import MemoryStore
from ctxd_sidecar.plugin.manager import open_store
from ctxd_sidecar.testing.store_conformance import StoreConformance, WriteDrops
from tests.support.faultproxy import FaultProxy


class TestMemoryStore(StoreConformance):
    persistent = False

    @pytest.fixture
    def make_store(self):
        return MemoryStore


class TestLmdbStore(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path):
        return lambda: LmdbStore(str(tmp_path / "lmdb"), map_size=256 << 20)


class _S3Drops:
    """S3 is reached over HTTP: a fault proxy drops connections after
    forwarding a PUT, so a reply is lost after moto applied the write."""

    @pytest.fixture
    def write_drops(self, s3_store_uri, moto_endpoint):
        proxy = FaultProxy(moto_endpoint).start()
        store = open_store(s3_store_uri.replace(moto_endpoint, proxy.url))

        def drop_writes(n: int) -> None:
            proxy.add("reset_after_forward", method="PUT", times=n)

        yield WriteDrops(store, drop_writes)
        store.close()
        proxy.stop()


class TestS3Store(_S3Drops, StoreConformance):
    @pytest.fixture
    def s3_store_uri(self, store_uri_for):
        return store_uri_for("s3")

    @pytest.fixture
    def make_store(self, s3_store_uri):
        return lambda: open_store(s3_store_uri)


class TestS3StoreWithoutList(_S3Drops, StoreConformance):
    @pytest.fixture
    def s3_store_uri(self, store_uri_for):
        return store_uri_for("s3-nolist")

    @pytest.fixture
    def make_store(self, s3_store_uri):
        return lambda: open_store(s3_store_uri)


class TestPostgresStore(StoreConformance):
    @pytest.fixture
    def make_store(self, pg_uri):
        return lambda: open_store(pg_uri)
