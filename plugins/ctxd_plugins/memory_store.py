"""``memory://``: an in-process store for tests and demos (nothing survives exit)."""

from __future__ import annotations

import bisect
import threading

from ctxd_sidecar.plugin import (
    CallStyle,
    Capability,
    Item,
    Store,
    check_precondition,
    content_version,
    store_hooks,
)


class MemoryStore(Store):
    name = "memory"
    capabilities = frozenset({Capability.LIST, Capability.DELETE, Capability.CONDITIONAL_PUT})
    call_style = frozenset({CallStyle.INLINE_READS})

    def __init__(self) -> None:
        self._items: dict[str, Item] = {}
        self._keys: list[str] = []  # sorted
        self._lock = threading.Lock()

    def get(self, key: str) -> Item | None:
        return self._items.get(key)

    def put(self, key, value, *, if_version=None, if_absent=False) -> str:
        item = Item(bytes(value), content_version(value))
        with self._lock:
            current = self._items.get(key)
            check_precondition(current, if_version, if_absent)
            if current is None:
                bisect.insort(self._keys, key)
            self._items[key] = item
        return item.version

    def delete(self, key, *, if_version=None) -> None:
        with self._lock:
            current = self._items.get(key)
            if if_version is not None:
                check_precondition(current, if_version, False)
            if current is not None:
                del self._items[key]
                del self._keys[bisect.bisect_left(self._keys, key)]

    def list(self, prefix, *, start_after="", limit=None) -> list[str]:
        with self._lock:
            lo = max(prefix, start_after)
            i = (
                bisect.bisect_right(self._keys, lo)
                if lo == start_after
                else bisect.bisect_left(self._keys, lo)
            )
            out: list[str] = []
            for key in self._keys[i:]:
                if not key.startswith(prefix) or (limit is not None and len(out) >= limit):
                    break
                out.append(key)
            return out


ctxd_store_schemes, ctxd_open_store = store_hooks("memory", lambda uri, options: MemoryStore())
