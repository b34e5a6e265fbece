"""The conformance suite every ctxd store backend must pass.

ctxd relies on a small contract (:mod:`ctxd_sidecar.plugin.store`): values round-trip
byte for byte, any non-empty UTF-8 key works, versions change when content
changes, and each capability a store declares holds exactly as documented,
while one it does not declare is refused with :class:`NotImplementedError`
rather than half-done. This module checks all of that with plain pytest
tests that a backend runs by subclassing :class:`StoreConformance` and
overriding one fixture, ``make_store``::

    # tests/test_conformance.py of a plugin package
    import pytest
    from ctxd_sidecar.testing.store_conformance import StoreConformance
    from ctxd_dirstore import DirStore

    class TestDirStore(StoreConformance):
        @pytest.fixture
        def make_store(self, tmp_path):
            return lambda: DirStore(tmp_path / "data")

``make_store`` returns a factory: every call opens the backend at the same
place (same directory, bucket, …), so the suite can close a store and open
it again. The fixture may use any other fixture (a server, a bucket); a
factory going through the plugin's URI tests the registration too::

    from ctxd_sidecar.plugin import open_store

    @pytest.fixture
    def make_store(self, tmp_path):
        return lambda: open_store(f"dir://{tmp_path}")

Tests for a capability the store does not declare are skipped (the report
says which); ``test_capability_is_honoured_or_refused`` checks both sides of
every capability.

The suite is built from one mixin per operation or capability, each usable
alone with the same ``make_store`` fixture (e.g. ``class TestMine(ListTests)``
while a backend is half-written): :class:`DeclarationTests`,
:class:`RoundTripTests`, :class:`KeyTests`, :class:`ConditionalPutTests`,
:class:`WriteIdentityTests`, :class:`DeleteTests`, :class:`ListTests`,
:class:`ConcurrencyTests`, :class:`AsyncWriteTests` and :class:`LifecycleTests`.
:class:`StoreConformance` is all of them, and what a backend must pass.

Class attributes tune the suite: set ``persistent = False`` for a store
whose data does not survive ``close()`` (like ``memory://``), and lower
``large_value_bytes`` or ``many_keys`` only if the backend documents a
smaller limit. A backend reached over a connection also overrides
``write_drops`` (a :class:`WriteDrops`: the store opened through a fault
that loses replies), so the write-identity checks run under dropped
connections too. Run with ``pytest -v`` to see every check by name.
"""

from __future__ import annotations

from ctxd_sidecar.testing.store_conformance.base import (
    AWKWARD_KEYS,
    StoreFixtures,
    put_many,
    require,
    store_declaring,
)
from ctxd_sidecar.testing.store_conformance.conditional import ConditionalPutTests
from ctxd_sidecar.testing.store_conformance.declaration import DeclarationTests
from ctxd_sidecar.testing.store_conformance.delete import DeleteTests
from ctxd_sidecar.testing.store_conformance.identity import WriteDrops, WriteIdentityTests
from ctxd_sidecar.testing.store_conformance.lifecycle import (
    AsyncWriteTests,
    ConcurrencyTests,
    LifecycleTests,
)
from ctxd_sidecar.testing.store_conformance.listing import ListTests
from ctxd_sidecar.testing.store_conformance.roundtrip import KeyTests, RoundTripTests

__all__ = [
    "AWKWARD_KEYS",
    "AsyncWriteTests",
    "ConcurrencyTests",
    "ConditionalPutTests",
    "DeclarationTests",
    "DeleteTests",
    "KeyTests",
    "LifecycleTests",
    "ListTests",
    "RoundTripTests",
    "StoreConformance",
    "StoreFixtures",
    "WriteDrops",
    "WriteIdentityTests",
    "put_many",
    "require",
    "store_declaring",
]


class StoreConformance(
    DeclarationTests,
    RoundTripTests,
    KeyTests,
    ConditionalPutTests,
    WriteIdentityTests,
    DeleteTests,
    ListTests,
    ConcurrencyTests,
    AsyncWriteTests,
    LifecycleTests,
):
    """Every check; subclass as ``Test<YourStore>`` and override ``make_store``."""
