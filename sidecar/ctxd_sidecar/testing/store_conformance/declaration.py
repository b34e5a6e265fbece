"""The declaration itself: well-formed, and every capability either honoured
or refused with NotImplementedError (never silently half-done)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ctxd_sidecar.plugin.store import CallStyle, Capability, Item, Store
from ctxd_sidecar.testing.store_conformance.base import StoreFixtures, declares


class DeclarationTests(StoreFixtures):
    def test_declares_capabilities_and_key_limit_properly(self, store: Store) -> None:
        assert isinstance(store.capabilities, frozenset)
        assert all(isinstance(cap, Capability) for cap in store.capabilities)
        assert isinstance(store.call_style, frozenset)
        assert all(isinstance(hint, CallStyle) for hint in store.call_style)
        limit = store.max_key_bytes
        assert limit is None or (isinstance(limit, int) and limit >= 64), (
            f"max_key_bytes must be None or a usable number of bytes, not {limit!r}"
        )
        assert isinstance(store.name, str) and store.name
        assert isinstance(store.describe(), str) and store.describe()

    @pytest.mark.parametrize("capability", [*Capability, *CallStyle], ids=lambda c: c.value)
    def test_capability_is_honoured_or_refused(
        self, store: Store, make_store: Callable[[], Store], capability: Capability | CallStyle
    ) -> None:
        """A declared capability works; an undeclared one raises
        NotImplementedError and leaves the data alone (never a silent no-op)."""
        self._open_another = make_store
        version = store.put("cap/key", b"original")
        check = getattr(self, f"_check_{capability.value}")
        check(store, declares(store, capability), version)

    def _check_list(self, store: Store, declared: bool, version: str) -> None:
        if declared:
            assert store.list("cap/") == ["cap/key"]
        else:
            with pytest.raises(NotImplementedError):
                store.list("cap/")

    def _check_delete(self, store: Store, declared: bool, version: str) -> None:
        if declared:
            store.delete("cap/key")
            assert store.get("cap/key") is None
        else:
            with pytest.raises(NotImplementedError):
                store.delete("cap/key")
            assert store.get("cap/key") == Item(b"original", version)

    def _check_conditional_put(self, store: Store, declared: bool, version: str) -> None:
        attempts: list[Callable[[], object]] = [
            lambda: store.put("cap/key", b"changed", if_version=version),
            lambda: store.put("cap/new", b"changed", if_absent=True),
        ]
        if declares(store, Capability.DELETE):
            attempts.append(lambda: store.delete("cap/key", if_version=version))
        if declared:
            new_version = store.put("cap/key", b"changed", if_version=version)
            assert store.get("cap/key") == Item(b"changed", new_version)
            assert store.put("cap/new", b"fresh", if_absent=True)
        else:
            self._refused(store, attempts, version)

    def _check_inline_reads(self, store: Store, declared: bool, version: str) -> None:
        # Nothing to refuse: a read is a read, only where it runs differs.
        assert store.get("cap/key") == Item(b"original", version)

    def _check_shared(self, store: Store, declared: bool, version: str) -> None:
        # A statement about deployment, not an operation: replicas on one
        # backend need compare-and-set that holds across processes, and see
        # one another's writes (as a second store opened on the same data).
        if declared:
            assert declares(store, Capability.CONDITIONAL_PUT)
            other = self._open_another()
            try:
                assert other.get("cap/key") == Item(b"original", version)
            finally:
                other.close()
        assert store.get("cap/key") == Item(b"original", version)

    def _check_change_feed(self, store: Store, declared: bool, version: str) -> None:
        # Another process's write must reach a watcher (a second store opened
        # on the same data stands in for another replica); stopping works.
        if not declared:
            with pytest.raises(NotImplementedError):
                store.watch("cap/", lambda key: None)
            return
        seen: list[str | None] = []
        arrived = threading.Event()

        def changed(key: str | None) -> None:
            seen.append(key)
            arrived.set()

        stop = store.watch("cap/", changed)
        other = self._open_another()
        try:
            other.put("elsewhere/key", b"not watched")
            other.put("cap/key", b"changed by another")
            assert arrived.wait(30), "no change notification within 30 s"
            assert "cap/key" in seen or None in seen
            assert "elsewhere/key" not in seen
            stop()
        finally:
            other.close()

    @staticmethod
    def _refused(store: Store, attempts: list[Callable[[], object]], version: str) -> None:
        for attempt in attempts:
            with pytest.raises(NotImplementedError):
                attempt()
        assert store.get("cap/key") == Item(b"original", version)
        assert store.get("cap/new") is None
