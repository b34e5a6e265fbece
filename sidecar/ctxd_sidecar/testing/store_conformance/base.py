"""What every conformance mixin shares: the fixtures, the tuning knobs and
the helpers (skip unless declared, concurrent writes, awkward keys)."""

from __future__ import annotations

import concurrent.futures
import hashlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from ctxd_sidecar.plugin.store import CallStyle, Capability, Store

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

SEED = 20240601


def declares(store: Store, cap: Capability | CallStyle) -> bool:
    """Whether ``store`` declares ``cap`` (a capability or a call style)."""
    if isinstance(cap, CallStyle):
        return cap in store.call_style
    return cap in store.capabilities


def require(store: Store, *caps: Capability) -> None:
    """Skip the calling test unless ``store`` declares every one of ``caps``."""
    missing = [cap.name for cap in caps if not declares(store, cap)]
    if missing:
        pytest.skip(f"{store.name} does not declare {', '.join(missing)}")


def store_declaring(*caps: Capability) -> Any:
    """A fixture (assign it in a mixin's class body): the ``store``, or the
    test skipped with a reason naming what the store does not declare."""

    @pytest.fixture
    def declaring(self: Any, store: Store) -> Store:
        require(store, *caps)
        return store

    names = ", ".join(cap.name for cap in caps)
    declaring.__doc__ = f"The store, if it declares {names} (else the test is skipped)."
    return declaring


def put_many(store: Store, items: Iterable[tuple[str, bytes]], workers: int = 16) -> None:
    """Write many keys concurrently (backends are called from worker threads)."""
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(store.put, key, value) for key, value in items]:
            future.result()


def digest(data: bytes) -> str:
    """A short stand-in for a large value in assertion messages."""
    return f"{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}"


class StoreFixtures:
    """The fixtures and knobs of every mixin; override :meth:`make_store`."""

    #: Data written and flushed survives ``close()`` and a fresh open.
    persistent: bool = True
    #: Size of the large-value round trip.
    large_value_bytes: int = 5 << 20
    #: Keys written for the listing that must span more than one S3 page (1000).
    many_keys: int = 1010

    @pytest.fixture
    def make_store(self) -> Callable[[], Store]:
        """Override: return a factory opening the backend under test; every
        call opens the same underlying data, empty at the start of a test."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the make_store fixture "
            "(see ctxd_sidecar.testing.store_conformance)"
        )

    @pytest.fixture
    def store(self, make_store: Callable[[], Store]) -> Iterator[Store]:
        """A freshly opened store, closed after the test."""
        opened = make_store()
        try:
            yield opened
        finally:
            opened.close()
