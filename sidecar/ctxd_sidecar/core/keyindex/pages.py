"""Index pages on the store: the format and the write protocol.

Format (JSON, UTF-8):

* root ``<namespace>/_index``: ``{"v": 2, "pages": [[lower, page_id], ...]}``
  sorted by ``lower``; the first lower bound is ``""``. Page ``i`` holds the
  names ``n`` with ``lower[i] <= n < lower[i+1]``.
* page ``<namespace>/_index.p/<page_id>``: ``{"v": 2, "lo": lower, "keys":
  {name: entry}}`` with at most :data:`PAGE_MAX` entries or
  :data:`PAGE_MAX_BYTES` bytes (a single larger entry is allowed).
* a *sealed* page also has ``"split": [[lower, new_id], ...]``: it is being
  replaced by those pages, whose contents are its entries cut at those
  bounds (so anyone can recompute them). Nobody writes to a sealed page.
* a *moved* page, ``{"v": 2, "moved": true}``, is what a sealed page becomes
  once the root no longer names it. Page ids are random and never reused,
  and pages are never deleted, so a page key that ever existed can never be
  created again by a late helper.
* version 1 (one record ``{"v": 1, "keys": {...}}`` at the root key) is
  read as is and migrated to pages by the first write. Sidecars that only
  know version 1 read a paged root as corrupted and would overwrite it, so
  every sidecar sharing a bucket is upgraded before any writes (a
  ``rebuild`` repairs the index if one did).

Every write is conditional (If-Match / If-None-Match), so sidecars sharing
a bucket never lose each other's changes:

* change names: route each name through the root (cached, with its
  version) to its page, CAS the page as last seen (GET it first when it is
  not cached or the CAS failed). A missing, moved or sealed page means the
  cached root is stale: finish the split if sealed, re-read the root, retry.
* split (a page would exceed its bounds): CAS the page to its sealed form
  *including* the new changes (this fences off every other writer), write
  the new pages create-only, CAS the root to name them instead, then CAS
  the old page to moved. A crash after sealing leaves a sealed page the root
  still names: its entries are complete, readers use them, and the next
  writer to that range finishes the split. A crash before the root CAS
  leaves new pages nobody references; the finishing writer's create-only
  writes find them (same content) and use them.
* migrate (root in version 1): write the pages create-only, then CAS the
  root from the version-1 record to the page list. A crash before the CAS
  leaves unreferenced pages and an intact version-1 index.

Pages never merge: removals leave small pages behind, which costs one
descriptor each in the root. The root is written only on splits, so a
create or remove costs a bounded number of requests (one conditional PUT of
the page as last read, or GET + PUT when that copy is stale; the root only
when it is stale or on a split) and bytes (one page), however many names the
namespace holds.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import math
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxd_sidecar.core import faults
from ctxd_sidecar.core.errors import Conflict, Unavailable
from ctxd_sidecar.core.storage import Storage

log = logging.getLogger(__name__)

ROOT_NAME = "_index"
PAGE_DIR = "_index.p/"
#: Most entries a page holds before it splits (tests may lower it, see :mod:`..faults`).
PAGE_MAX = faults.INDEX_PAGE_MAX or 256
#: Most bytes a page holds before it splits (names with large metadata).
PAGE_MAX_BYTES = 64 * 1024
#: Attempts of each compare-and-set loop before giving up (UNAVAILABLE).
MAX_CAS_ATTEMPTS = 50

MOVED = b'{"moved":true,"v":2}'

#: A change to one name: ``(entry or None, now_ms) -> new entry or None (absent)``.
Change = Callable[[dict[str, Any] | None, int], dict[str, Any] | None]


@dataclass
class Root:
    version: str | None  # None: no root record yet
    lowers: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    #: Entries of a version-1 (or corrupted) root, not yet migrated to pages.
    legacy: dict[str, Any] | None = None

    def locate(self, name: str) -> int:
        return max(0, bisect.bisect_right(self.lowers, name) - 1)


@dataclass
class Page:
    id: str
    version: str | None
    lo: str = ""
    entries: dict[str, Any] = field(default_factory=dict)
    split: list[tuple[str, str]] | None = None
    moved: bool = False
    _names: list[str] | None = None

    def names(self) -> list[str]:
        if self._names is None:
            self._names = sorted(self.entries)
        return self._names


def _dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()


def encode_root(lowers: list[str], ids: list[str]) -> bytes:
    return _dumps({"v": 2, "pages": [list(p) for p in zip(lowers, ids, strict=True)]})


def encode_page(lo: str, entries: dict[str, Any], split=None) -> bytes:
    doc: dict[str, Any] = {"v": 2, "lo": lo, "keys": entries}
    if split is not None:
        doc["split"] = [list(s) for s in split]
    return _dumps(doc)


def _keys(doc: dict[str, Any]) -> dict[str, Any]:
    keys = doc["keys"]
    if not isinstance(keys, dict):
        raise TypeError
    return {k: v if isinstance(v, dict) else {} for k, v in keys.items()}


def decode_root(raw: bytes, version: str, where: str) -> Root:
    try:
        doc = json.loads(raw)
        if doc.get("v") == 2:
            pages = [(str(lo), str(pid)) for lo, pid in doc["pages"]]
            if not pages or pages[0][0] != "" or pages != sorted(pages):
                raise ValueError
            return Root(version, [p[0] for p in pages], [p[1] for p in pages])
        return Root(version, legacy=_keys(doc))
    except (ValueError, KeyError, TypeError, AttributeError):
        # A corrupted index lists nothing until rebuilt; values are untouched.
        log.error("index record is corrupted; run a rebuild", extra={"index": where})
        return Root(version, legacy={})


def decode_page(pid: str, raw: bytes, version: str, where: str) -> Page:
    try:
        doc = json.loads(raw)
        if doc.get("moved"):
            return Page(pid, version, moved=True)
        split = doc.get("split")
        if split is not None:
            split = [(str(lo), str(sid)) for lo, sid in split]
        return Page(pid, version, str(doc.get("lo", "")), _keys(doc), split)
    except (ValueError, KeyError, TypeError, AttributeError):
        log.error("index page is corrupted; run a rebuild", extra={"index": where})
        return Page(pid, version)


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def plan_split(
    lo: str, entries: dict[str, Any], size: int, page_max: int, page_max_bytes: int, least: int = 2
) -> list[tuple[str, str]]:
    """Lower bounds and fresh ids of the pages ``entries`` is cut into (each ~3/4 full)."""
    names = sorted(entries)
    n = len(names)
    k = max(
        least,
        math.ceil(n / max(1, page_max * 3 // 4)),
        math.ceil(size / max(1, page_max_bytes * 3 // 4)),
    )
    k = max(1, min(k, n))
    lowers = [lo] + [names[j * n // k] for j in range(1, k)]
    return [(lower, new_id()) for lower in lowers]


def partition(entries: dict[str, Any], split: list[tuple[str, str]]) -> list[dict[str, Any]]:
    lowers = [lo for lo, _ in split]
    parts: list[dict[str, Any]] = [{} for _ in split]
    for name in sorted(entries):
        parts[max(0, bisect.bisect_right(lowers, name) - 1)][name] = entries[name]
    return parts


def fresh_adds(entry: dict[str, Any] | None, now: int, grace_ms: int) -> dict[str, int]:
    """The writers that added this entry less than ``grace_ms`` ago (name -> time)."""
    if not entry:
        return {}
    adds = entry.get("a") or {}
    return {w: t for w, t in adds.items() if isinstance(t, int) and now - t < grace_ms}


def without_stale_adds(entry: dict[str, Any], now: int, grace_ms: int) -> dict[str, Any]:
    if "a" not in entry or fresh_adds(entry, now, grace_ms):
        return entry
    return {k: v for k, v in entry.items() if k != "a"}


async def backoff(attempt: int) -> None:
    await asyncio.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))


class PageStore:
    """Reads and conditionally writes the root and pages of one namespace."""

    def __init__(self, storage: Storage, prefix: str, namespace: str) -> None:
        self.storage = storage
        self.prefix = prefix
        self.namespace = namespace
        self.root_key = prefix + ROOT_NAME
        self.page_max = PAGE_MAX
        self.page_max_bytes = PAGE_MAX_BYTES
        self.grace_ms = 0  # add-markers older than this are dropped when a page is written
        self.root: Root | None = None  # last root seen
        self._pages: dict[str, Page] = {}  # parsed pages by id (reused while unchanged)

    def page_key(self, pid: str) -> str:
        return self.prefix + PAGE_DIR + pid

    # -- reads -------------------------------------------------------------------
    async def read_root(self) -> Root:
        item = await self.storage.get(self.root_key)
        if item is None:
            self.root = Root(None)
        elif self.root is None or self.root.version != item.version:
            self.root = decode_root(item.value, item.version, self.root_key)
        return self.root

    async def read_page(self, pid: str) -> Page | None:
        item = await self.storage.get(self.page_key(pid))
        if item is None:
            self._pages.pop(pid, None)
            return None
        cached = self._pages.get(pid)
        if cached is not None and cached.version == item.version:
            return cached
        page = decode_page(pid, item.value, item.version, self.page_key(pid))
        self._remember(page)
        return page

    def _remember(self, page: Page) -> None:
        if page.moved:
            self._pages.pop(page.id, None)
        else:
            self._pages[page.id] = page

    # -- writes ------------------------------------------------------------------
    async def ensure(self) -> Root:
        """Bring the root to the paged format (create or migrate it)."""
        root = await self.read_root()
        for _ in range(MAX_CAS_ATTEMPTS):
            if root.version is None:
                root = await self._create_root()
            elif root.legacy is not None:
                root = await self._migrate(root)
            else:
                return root
        raise Unavailable(f"the {self.namespace} index is too contended; retry")

    async def apply(self, changes: list[tuple[str, Change]], now_ms: Callable[[], int]) -> None:
        """Apply ``changes`` (in order per name), each page in one conditional write."""
        pending = changes
        root = self.root
        for attempt in range(MAX_CAS_ATTEMPTS):
            if root is None or attempt:
                root = await self.read_root()
            if root.version is None:
                root = await self._create_root()
                continue
            if root.legacy is not None:
                root = await self._migrate(root)
                continue
            groups: dict[int, list[tuple[str, Change]]] = {}
            for name, change in pending:
                groups.setdefault(root.locate(name), []).append((name, change))
            order = sorted(groups)
            done = await asyncio.gather(
                *(self._write_page(root, i, groups[i], now_ms) for i in order)
            )
            pending = [c for i, ok in zip(order, done, strict=True) if not ok for c in groups[i]]
            if not pending:
                return
            await backoff(attempt)
        raise Unavailable(f"the {self.namespace} index is too contended; retry")

    async def _write_page(
        self, root: Root, i: int, group: list[tuple[str, Change]], now_ms: Callable[[], int]
    ) -> bool:
        """Write ``group`` into page ``i``; False when the root turned out stale."""
        pid = root.ids[i]
        key = self.page_key(pid)
        for attempt in range(MAX_CAS_ATTEMPTS):
            # The page as last seen, if any: its version makes the write conditional,
            # so a stale copy costs one failed write, and a fresh one saves a GET.
            page = cached = self._pages.get(pid) if attempt == 0 else None
            if page is None:
                page = await self.read_page(pid)
            if page is None:
                if not await self._confirm_lost(pid, root.lowers[i]):
                    return False
                continue
            if page.moved:
                return False
            if page.split is not None:
                await self.finish_split(page)
                return False
            now = now_ms()
            # A copy without stale add-markers: changes return new entries.
            entries = {
                n: without_stale_adds(e, now, self.grace_ms) for n, e in page.entries.items()
            }
            changed = False
            for name, change in group:
                old = entries.get(name)
                new = change(old, now)
                if new != old:
                    changed = True
                    if new is None:
                        del entries[name]
                    else:
                        entries[name] = new
            if not changed:
                if cached is not None:
                    continue  # "nothing to do" must be decided on the stored page
                return True
            body = encode_page(page.lo, entries)
            over = len(entries) > self.page_max or len(body) > self.page_max_bytes
            try:
                if over and len(entries) > 1:
                    split = plan_split(
                        page.lo, entries, len(body), self.page_max, self.page_max_bytes
                    )
                    body = encode_page(page.lo, entries, split)
                    version = await self.storage.put(key, body, if_version=page.version)
                    faults.crash_point(f"{self.namespace}.after_page_seal")
                    await self.finish_split(Page(pid, version, page.lo, entries, split))
                    return True
                version = await self.storage.put(key, body, if_version=page.version)
            except Conflict:
                await backoff(attempt)
                continue
            self._remember(Page(pid, version, page.lo, entries))
            return True
        raise Unavailable(f"the {self.namespace} index is too contended; retry")

    async def _confirm_lost(self, pid: str, lower: str) -> bool:
        """A page the root names is missing: recreate it empty if the root still names it."""
        root = await self.read_root()
        if pid not in root.ids:
            return False
        log.error("index page is missing; run a rebuild", extra={"index": self.page_key(pid)})
        try:
            await self.storage.put(self.page_key(pid), encode_page(lower, {}), if_absent=True)
        except Conflict:
            pass
        return True

    async def finish_split(self, page: Page) -> None:
        """Complete the split of a sealed page (idempotent; any process may do it)."""
        assert page.split is not None
        for attempt in range(MAX_CAS_ATTEMPTS):
            root = await self.read_root()
            if root.version is None or root.legacy is not None or page.id not in root.ids:
                break  # done already (or the index was replaced): only the old page is left
            if attempt == 0:
                parts = partition(page.entries, page.split)
                for (lo, sid), part in zip(page.split, parts, strict=True):
                    try:
                        version = await self.storage.put(
                            self.page_key(sid), encode_page(lo, part), if_absent=True
                        )
                        self._remember(Page(sid, version, lo, part))
                    except Conflict:
                        pass  # written by the splitter or another helper: same content
                faults.crash_point(f"{self.namespace}.after_page_split")
            i = root.ids.index(page.id)
            lowers = root.lowers[:i] + [lo for lo, _ in page.split] + root.lowers[i + 1 :]
            ids = root.ids[:i] + [sid for _, sid in page.split] + root.ids[i + 1 :]
            try:
                version = await self.storage.put(
                    self.root_key, encode_root(lowers, ids), if_version=root.version
                )
            except Conflict:
                await backoff(attempt)
                continue
            self.root = Root(version, lowers, ids)
            break
        else:
            raise Unavailable(f"the {self.namespace} index is too contended; retry")
        try:
            await self.storage.put(self.page_key(page.id), MOVED, if_version=page.version)
        except Conflict:
            pass  # another helper marked it
        self._pages.pop(page.id, None)

    async def _create_root(self) -> Root:
        pid = new_id()
        await self.storage.put(self.page_key(pid), encode_page("", {}), if_absent=True)
        try:
            version = await self.storage.put(
                self.root_key, encode_root([""], [pid]), if_absent=True
            )
        except Conflict:  # another process created it; our empty page is never referenced
            return await self.read_root()
        self.root = Root(version, [""], [pid])
        return self.root

    async def _migrate(self, root: Root) -> Root:
        """Turn a version-1 (or corrupted) root into pages, create-only then CAS."""
        entries = root.legacy or {}
        size = len(encode_page("", entries))
        split = plan_split("", entries, size, self.page_max, self.page_max_bytes, least=1)
        if not split:
            split = [("", new_id())]
        for (lo, sid), part in zip(split, partition(entries, split), strict=True):
            await self.storage.put(self.page_key(sid), encode_page(lo, part), if_absent=True)
        lowers, ids = [lo for lo, _ in split], [sid for _, sid in split]
        try:
            version = await self.storage.put(
                self.root_key, encode_root(lowers, ids), if_version=root.version
            )
        except Conflict:  # changed meanwhile (an older sidecar's write): re-read, redo
            return await self.read_root()
        log.info("index migrated to pages", extra={"index": self.root_key, "pages": len(ids)})
        self.root = Root(version, lowers, ids)
        return self.root
