"""Run ctxd's store conformance suite against the dir store, opened through
its URI so the entry point and hooks are tested too."""

import pytest

from ctxd_sidecar.plugin import open_store
from ctxd_sidecar.testing.store_conformance import StoreConformance


class TestDirStore(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path):
        return lambda: open_store(f"dir://{tmp_path}")


class TestDirStoreWithoutLocking(StoreConformance):
    @pytest.fixture
    def make_store(self, tmp_path):
        return lambda: open_store(f"dir://{tmp_path}?locking=false")
