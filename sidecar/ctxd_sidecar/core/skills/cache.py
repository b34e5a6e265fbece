"""Skill bodies: capped, hashed, and cached in memory by hash (never stored)."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable


def body_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cap_body(text: str, max_bytes: int) -> tuple[str, bool]:
    """Cut ``text`` to ``max_bytes`` on a character boundary, with a note appended."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, False
    head = data[:max_bytes].decode("utf-8", "ignore")
    return f"{head}\n\n[skill body truncated to skills.max_body_bytes = {max_bytes} bytes]", True


class BodyCache:
    """Skill bodies by SHA-256, bounded by total bytes (least recently used dropped)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, str] = OrderedDict()
        self._bytes = 0

    def get(self, digest: str) -> str | None:
        text = self._items.get(digest)
        if text is not None:
            self._items.move_to_end(digest)
        return text

    def put(self, digest: str, text: str) -> None:
        if digest in self._items:
            self._items.move_to_end(digest)
            return
        self._items[digest] = text
        self._bytes += len(text.encode("utf-8"))
        while self._bytes > self.max_bytes and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            self._bytes -= len(old.encode("utf-8"))

    def retain(self, digests: Iterable[str]) -> int:
        """Drop every body not in ``digests``; returns how many were dropped."""
        keep = set(digests)
        drop = [d for d in self._items if d not in keep]
        for digest in drop:
            self._bytes -= len(self._items.pop(digest).encode("utf-8"))
        return len(drop)

    def __contains__(self, digest: str) -> bool:
        return digest in self._items

    def __len__(self) -> int:
        return len(self._items)
