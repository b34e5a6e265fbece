"""Agent memory: a durable JSON key/value space per instance (SPEC section 5).

:class:`Memory` validates every request (key rules, strict JSON, value cap,
TTL, paging) and hands it to a backend: :class:`StoreMemory` keeps records
in the sidecar's store; :class:`sidecar.core.memory_mcp.McpMemory` routes
operations to an MCP memory server's tools.

Stored record (key ``memory/<key>`` in the instance namespace) is one JSON
object, ``{"ts":…,"expires_at":…,"by":…,"value":<value>}``, where
``<value>`` is the caller's JSON text spliced in verbatim (never
re-serialised), and ``expires_at``/``by`` are omitted when unset. The
version is the store's opaque version of that record.

Caps and their accounting: ``max_value_bytes`` is checked per request;
``max_keys`` and ``max_total_bytes`` are checked against counters of the
records in the store (count and value bytes). The counters are computed by
one scan at start-up (retried in the background if the store is down;
writes answer UNAVAILABLE until then) and then kept exact by this process's
own writes: every write is conditional on the version it read, so the delta
it applies is the true one even under concurrent writes (on a store without
conditional writes, writes to one key are serialised in the process
instead). A write reserves its delta before it is sent, so concurrent
writes cannot jointly overshoot a cap. Records written by another sidecar
sharing the same instance namespace are only counted at this sidecar's next
start. Expired records count until swept; a write that would exceed a cap
first sweeps whatever has expired. Expiry is scheduled from the same scan
and from this process's writes (a heap of expiry times), so a sweep costs
nothing when nothing is due.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import binascii
import heapq
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sidecar.config import MemoryConfig
from sidecar.core.errors import Conflict, InvalidArgument, LimitExceeded, NotFound, Unavailable
from sidecar.core.jsonvalue import validate_json
from sidecar.core.keyindex import KeyIndex
from sidecar.core.observe import MemoryObserver, NullObserver
from sidecar.core.storage import Storage
from sidecar.store import Item

log = logging.getLogger(__name__)

NAMESPACE = "memory"
#: Longest key, in characters (the store may also bound its bytes).
MAX_KEY_CHARS = 256
#: Longest ``by`` (author) text, in characters.
MAX_BY_CHARS = 256
#: Longest expected_version accepted (versions are short opaque strings).
MAX_VERSION_CHARS = 256
#: Longest TTL accepted: 100 years, in seconds.
MAX_TTL_SECONDS = 100 * 365 * 24 * 3600
DEFAULT_LIST_LIMIT = 100
#: Larger page sizes are reduced to this.
MAX_LIST_LIMIT = 1000
#: A page with values ends early rather than carry more value bytes than this
#: (gRPC messages are capped at 16 MiB); at least one record is always returned.
MAX_PAGE_VALUE_BYTES = 4 * 1024 * 1024
#: Retries when a concurrent write changes a record between read and write.
MAX_WRITE_ATTEMPTS = 20

_NOT_COUNTED = "memory is not ready for writes: the store could not be read at start-up (retrying)"
_KEY_BAD_CHAR = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")
_TEXT_BAD_CHAR = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_VALUE_MARK = b',"value":'


@dataclass(slots=True)
class MemoryRecord:
    key: str
    #: The value's JSON text exactly as set; None when listed without values.
    value_json: str | None
    version: str
    updated_ms: int
    #: Absolute expiry in ms since the epoch; 0 means never.
    expires_at_ms: int = 0
    by: str = ""


@dataclass(slots=True)
class MemoryPage:
    records: list[MemoryRecord]
    #: Empty on the last page.
    next_page_token: str = ""


# -- validation -------------------------------------------------------------------
def validate_key(key: str, field: str = "key") -> None:
    """Key rules: 1-256 characters, no leading ``_``, no whitespace or control
    characters, no empty, ``.`` or ``..`` segments between ``/``."""
    if not key:
        raise InvalidArgument(field, "must not be empty")
    if len(key) > MAX_KEY_CHARS:
        raise InvalidArgument(field, f"is {len(key)} characters; at most {MAX_KEY_CHARS}")
    if key[0] == "_":
        raise InvalidArgument(field, 'must not start with "_" (reserved)')
    bad = _KEY_BAD_CHAR.search(key)
    if bad:
        raise InvalidArgument(
            field, f"must not contain whitespace or control characters (found {bad.group()!r})"
        )
    padded = f"/{key}/"
    if "//" in padded:
        raise InvalidArgument(field, 'must not have empty segments (leading, trailing or "//")')
    if "/./" in padded or "/../" in padded:
        raise InvalidArgument(field, 'must not have "." or ".." segments')


def validate_prefix(prefix: str) -> None:
    """A list prefix is any start of a valid key (so it may end in ``/``)."""
    if not prefix:
        return
    if len(prefix) > MAX_KEY_CHARS:
        raise InvalidArgument("prefix", f"is {len(prefix)} characters; at most {MAX_KEY_CHARS}")
    if prefix[0] == "_":
        raise InvalidArgument("prefix", 'must not start with "_" (reserved)')
    if _KEY_BAD_CHAR.search(prefix):
        raise InvalidArgument("prefix", "must not contain whitespace or control characters")
    padded = f"/{prefix}"
    if "//" in padded or "/./" in padded or "/../" in padded:
        raise InvalidArgument("prefix", 'must not have empty, "." or ".." segments')


# -- record format -------------------------------------------------------------------
def encode_record(value: bytes, ts: int, expires_at: int, by: str) -> bytes:
    head = f'{{"ts":{ts}'
    if expires_at:
        head += f',"expires_at":{expires_at}'
    if by:
        head += ',"by":' + json.dumps(by, ensure_ascii=False)
    return b"".join((head.encode(), _VALUE_MARK, value, b"}"))


@dataclass(slots=True)
class _Stored:
    """A decoded record; ``value`` is the raw JSON bytes."""

    ts: int
    expires_at: int
    by: str
    value: bytes

    def expired(self, now_ms: int) -> bool:
        return 0 < self.expires_at <= now_ms


def decode_record(raw: bytes) -> _Stored | None:
    """Parse a stored record; None if it is not one ctxd wrote."""
    # The marker cannot occur inside the header: in JSON strings '"' is escaped.
    i = raw.find(_VALUE_MARK)
    if i < 0 or raw[-1:] != b"}":
        return None
    value = raw[i + len(_VALUE_MARK) : -1]
    if raw.startswith(b'{"ts":'):
        # Fast path for the header encode_record writes (no JSON parse on Get).
        ts, _, rest = raw[6:i].partition(b",")
        expires = b"0"
        if rest.startswith(b'"expires_at":'):
            expires, _, rest = rest[13:].partition(b",")
        if not rest and ts.isdigit() and expires.isdigit():
            return _Stored(int(ts), int(expires), "", value)
    try:
        head = json.loads(raw[:i] + b"}")
        return _Stored(
            int(head["ts"]), int(head.get("expires_at", 0)), str(head.get("by", "")), value
        )
    except (ValueError, KeyError, TypeError):
        return None


def _page_token(prefix: str, last_key: str) -> str:
    raw = json.dumps([prefix, last_key], ensure_ascii=False, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _token_after(prefix: str, token: str) -> str:
    if not token:
        return ""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        tprefix, last = json.loads(raw)
        if not isinstance(tprefix, str) or not isinstance(last, str):
            raise ValueError
    except (ValueError, binascii.Error, TypeError):
        raise InvalidArgument("page_token", "is not a token returned by a previous List") from None
    if tprefix != prefix:
        raise InvalidArgument("page_token", "was issued for a different prefix")
    return last


# -- backends ---------------------------------------------------------------------------
class MemoryBackend(abc.ABC):
    """Where memory lives. Requests reaching a backend are already validated."""

    async def start(self) -> None:  # noqa: B027 - optional
        """Start background work."""

    async def stop(self) -> None:  # noqa: B027 - optional
        """Stop background work."""

    @abc.abstractmethod
    async def get(self, key: str) -> MemoryRecord: ...

    @abc.abstractmethod
    async def set(
        self,
        key: str,
        value_json: str,
        value: bytes,
        *,
        ttl_seconds: int,
        expected_version: str,
        create_only: bool,
        by: str,
    ) -> MemoryRecord: ...

    @abc.abstractmethod
    async def delete(self, key: str, *, expected_version: str) -> bool: ...

    @abc.abstractmethod
    async def list(
        self, prefix: str, *, limit: int, page_token: str, include_values: bool
    ) -> MemoryPage: ...


class Memory:
    """The memory service: validates requests, then hands them to a backend."""

    def __init__(self, config: MemoryConfig, backend: MemoryBackend) -> None:
        self.config = config
        self.backend = backend

    async def start(self) -> None:
        await self.backend.start()

    async def stop(self) -> None:
        await self.backend.stop()

    async def get(self, key: str) -> MemoryRecord:
        validate_key(key)
        return await self.backend.get(key)

    async def set(
        self,
        key: str,
        value_json: str,
        *,
        ttl_seconds: int = 0,
        expected_version: str = "",
        create_only: bool = False,
        by: str = "",
    ) -> MemoryRecord:
        validate_key(key)
        if ttl_seconds < 0:
            raise InvalidArgument("ttl_seconds", "must be 0 (never expires) or a positive number")
        if ttl_seconds > MAX_TTL_SECONDS:
            raise InvalidArgument("ttl_seconds", f"must be at most {MAX_TTL_SECONDS} (100 years)")
        if expected_version and create_only:
            raise InvalidArgument("create_only", "cannot be combined with expected_version")
        _check_version(expected_version)
        if len(by) > MAX_BY_CHARS:
            raise InvalidArgument("by", f"is {len(by)} characters; at most {MAX_BY_CHARS}")
        if by and _TEXT_BAD_CHAR.search(by):
            raise InvalidArgument("by", "must not contain control characters or line breaks")
        value = value_json.encode()
        cap = self.config.max_value_bytes
        if len(value) > cap:
            raise LimitExceeded(
                "memory.max_value_bytes",
                cap,
                f"value is {len(value)} bytes; memory.max_value_bytes is {cap}",
            )
        validate_json(value_json, max_depth=self.config.max_depth)
        return await self.backend.set(
            key,
            value_json,
            value,
            ttl_seconds=ttl_seconds,
            expected_version=expected_version,
            create_only=create_only,
            by=by,
        )

    async def delete(self, key: str, *, expected_version: str = "") -> bool:
        validate_key(key)
        _check_version(expected_version)
        return await self.backend.delete(key, expected_version=expected_version)

    async def list(
        self,
        prefix: str = "",
        *,
        limit: int = 0,
        page_token: str = "",
        include_values: bool = False,
    ) -> MemoryPage:
        validate_prefix(prefix)
        if limit < 0:
            raise InvalidArgument("limit", f"must be 0 (default {DEFAULT_LIST_LIMIT}) or positive")
        limit = min(limit or DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)
        return await self.backend.list(
            prefix, limit=limit, page_token=page_token, include_values=include_values
        )


def _check_version(version: str) -> None:
    if len(version) > MAX_VERSION_CHARS:
        raise InvalidArgument("expected_version", "is not a version returned by Get or Set")


# -- the store-backed backend -----------------------------------------------------------
class StoreMemory(MemoryBackend):
    """Memory records in the sidecar's store, with caps, TTL sweeping and listing.

    On a store with LIST a Set is one store write and a Get one read; on a
    store without LIST, creating or deleting a key also updates the
    ``memory/_index`` record (see :mod:`sidecar.core.keyindex`).
    """

    #: Told the counters after every change (the composition root sets it).
    observer: MemoryObserver = NullObserver()

    def __init__(
        self,
        config: MemoryConfig,
        storage: Storage,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.storage = storage
        #: Wall clock in seconds; replaceable (tests move time forward).
        self.clock = clock
        self.index = KeyIndex(storage, NAMESPACE, clock=lambda: self.clock())
        self._prefix = NAMESPACE + "/"
        #: Records in the store and the bytes of their values (see module doc).
        self.keys = 0
        self.total_bytes = 0
        # Expiry schedule: key -> expires_at_ms, plus a heap of (expires_at_ms, key)
        # whose stale entries (no longer matching the map) are skipped.
        self._expiry: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []
        # Writes are conditional on the version read, where the store can do that.
        self._cas = storage.can_cas
        # Writes to one key are serialised in this process where the index
        # protocol needs it, or where the store cannot check versions itself.
        self._serialise = self.index.active or not self._cas
        self._key_locks: dict[str, list] = {}
        self._tasks: list[asyncio.Task] = []
        #: False until the counters were computed (writes wait for them).
        self.counted = False

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _if(self, item: Item) -> str | None:
        return item.version if self._cas else None

    # -- lifecycle ---------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self.recount()
        except Unavailable as exc:
            # Serve anyway (reads fail or succeed on their own); writes wait
            # for the counters, which a background task retries.
            log.warning("memory cannot count its records yet", extra={"error": exc.message})
            self._tasks.append(asyncio.create_task(self._recount_until_done(), name="memory-count"))
        if self.config.sweep_interval > 0:
            self._tasks.append(asyncio.create_task(self._sweep_forever(), name="memory-sweeper"))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _recount_until_done(self) -> None:
        delay = 0.5
        while True:
            await asyncio.sleep(delay)
            try:
                await self.recount()
                return
            except Unavailable:
                delay = min(delay * 2, 30.0)

    async def recount(self) -> None:
        """Rebuild the key/byte counters and the expiry schedule from the store."""
        keys = total = 0
        expiry: dict[str, int] = {}
        for name, item in await self.index.scan():
            keys += 1
            rec = decode_record(item.value)
            if rec is None:
                continue  # not written by ctxd: a key, but no value bytes to count
            total += len(rec.value)
            if rec.expires_at:
                expiry[name] = rec.expires_at
        self.keys, self.total_bytes = keys, total
        self.observer.memory_counts(self.keys, self.total_bytes)
        self.counted = True
        self._expiry = expiry
        self._heap = [(t, k) for k, t in expiry.items()]
        heapq.heapify(self._heap)
        log.info("memory counted", extra={"keys": keys, "bytes": total, "expiring": len(expiry)})

    # -- operations ----------------------------------------------------------------
    async def get(self, key: str) -> MemoryRecord:
        item = await self.storage.get(self._prefix + key)
        rec = None if item is None else decode_record(item.value)
        if rec is None or rec.expired(self._now_ms()):
            raise NotFound(f"memory key {key!r} not found")
        return MemoryRecord(key, rec.value.decode(), item.version, rec.ts, rec.expires_at, rec.by)

    async def set(
        self,
        key: str,
        value_json: str,
        value: bytes,
        *,
        ttl_seconds: int,
        expected_version: str,
        create_only: bool,
        by: str,
    ) -> MemoryRecord:
        if not self.counted:
            raise Unavailable(_NOT_COUNTED)
        if self._serialise:
            async with self._key_lock(key):
                return await self._set(
                    key, value_json, value, ttl_seconds, expected_version, create_only, by
                )
        return await self._set(
            key, value_json, value, ttl_seconds, expected_version, create_only, by
        )

    async def _set(
        self,
        key: str,
        value_json: str,
        value: bytes,
        ttl_seconds: int,
        expected_version: str,
        create_only: bool,
        by: str,
    ) -> MemoryRecord:
        full = self._prefix + key
        size = len(value)
        for _ in range(MAX_WRITE_ATTEMPTS):
            now = self._now_ms()
            old_item = await self.storage.get(full)
            old = None if old_item is None else decode_record(old_item.value)
            live = old is not None and not old.expired(now)
            if create_only and live:
                raise Conflict(f"memory key {key!r} already exists (create_only)")
            if expected_version and (not live or old_item.version != expected_version):
                raise Conflict(
                    f"memory key {key!r} is not at version {expected_version!r}; re-read and retry"
                    if live
                    else f"memory key {key!r} does not exist (expected_version was given)"
                )
            new_keys = 0 if old_item is not None else 1
            new_bytes = size - (len(old.value) if old is not None else 0)
            await self._reserve(key, new_keys, new_bytes)
            expires_at = now + ttl_seconds * 1000 if ttl_seconds else 0
            record = encode_record(value, now, expires_at, by)
            try:
                if old_item is None:
                    await self.index.add(key)
                    version = await self.storage.put(full, record, if_absent=self._cas)
                else:
                    version = await self.storage.put(full, record, if_version=self._if(old_item))
            except Conflict:
                self._release(new_keys, new_bytes)
                if expected_version or create_only:
                    raise Conflict(
                        f"memory key {key!r} changed concurrently; re-read and retry"
                    ) from None
                continue  # a concurrent write won: re-read and apply on top of it
            except BaseException:
                self._release(new_keys, new_bytes)
                raise
            self._schedule(key, expires_at)
            return MemoryRecord(key, value_json, version, now, expires_at, by)
        raise Unavailable(f"memory key {key!r} is changing too often; retry")

    async def delete(self, key: str, *, expected_version: str) -> bool:
        if not self.counted:
            raise Unavailable(_NOT_COUNTED)
        if self._serialise:
            async with self._key_lock(key):
                return await self._delete(key, expected_version)
        return await self._delete(key, expected_version)

    async def _delete(self, key: str, expected_version: str) -> bool:
        full = self._prefix + key
        for _ in range(MAX_WRITE_ATTEMPTS):
            item = await self.storage.get(full)
            rec = None if item is None else decode_record(item.value)
            live = rec is not None and not rec.expired(self._now_ms())
            if expected_version and (not live or item.version != expected_version):
                raise Conflict(
                    f"memory key {key!r} is not at version {expected_version!r}; re-read and retry"
                    if live
                    else f"memory key {key!r} does not exist (expected_version was given)"
                )
            if item is None:
                return False
            try:
                await self.storage.delete(full, if_version=self._if(item))
            except Conflict:
                if expected_version:
                    raise Conflict(
                        f"memory key {key!r} changed concurrently; re-read and retry"
                    ) from None
                continue
            self._forget(key, rec)
            await self.index.remove(key)
            return live
        raise Unavailable(f"memory key {key!r} is changing too often; retry")

    async def list(
        self, prefix: str, *, limit: int, page_token: str, include_values: bool
    ) -> MemoryPage:
        after = _token_after(prefix, page_token)
        now = self._now_ms()
        out: list[MemoryRecord] = []
        value_bytes = 0
        more = False  # a live record exists beyond this page
        while not more:
            # One more than the page needs, to learn whether a next page exists.
            want = limit + 1 - len(out)
            batch = await self.index.scan(prefix, start_after=after, limit=want)
            for name, item in batch:
                rec = decode_record(item.value)
                if rec is None or rec.expired(now):
                    continue
                size = len(rec.value) if include_values else 0
                if len(out) == limit or (out and value_bytes + size > MAX_PAGE_VALUE_BYTES):
                    more = True
                    break
                value_bytes += size
                value = rec.value.decode() if include_values else None
                out.append(MemoryRecord(name, value, item.version, rec.ts, rec.expires_at, rec.by))
            if len(batch) < want:
                break
            after = batch[-1][0]
        return MemoryPage(out, _page_token(prefix, out[-1].key) if more else "")

    # -- expiry --------------------------------------------------------------------
    async def sweep(self, *, skip_busy: bool = False) -> int:
        """Delete every record that has expired; return how many were removed.

        With ``skip_busy``, keys being written right now are left for later
        (a write that sweeps to make room must not wait on itself).
        """
        now = self._now_ms()
        removed = 0
        later: list[tuple[int, str]] = []
        try:
            while self._heap and self._heap[0][0] <= now:
                expires_at, key = heapq.heappop(self._heap)
                if self._expiry.get(key) != expires_at:
                    continue  # rewritten since it was scheduled
                if skip_busy and key in self._key_locks:
                    later.append((expires_at, key))
                    continue
                try:
                    if await self._expire(key, now):
                        removed += 1
                except Unavailable:
                    later.append((expires_at, key))  # try again next sweep
                    raise
        finally:
            for entry in later:
                heapq.heappush(self._heap, entry)
        if removed:
            log.info("memory swept", extra={"removed": removed})
        return removed

    async def _expire(self, key: str, now: int) -> bool:
        async with self._key_lock(key):
            full = self._prefix + key
            item = await self.storage.get(full)
            rec = None if item is None else decode_record(item.value)
            if rec is None or not rec.expired(now):
                if item is None:
                    self._expiry.pop(key, None)
                return False
            try:
                await self.storage.delete(full, if_version=self._if(item))
            except Conflict:
                return False  # rewritten meanwhile; its new expiry is scheduled
            self._forget(key, rec)
            await self.index.remove(key)
            return True

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep sweeping; the store may come back
                log.warning("memory sweep failed; retrying later", exc_info=True)

    def _schedule(self, key: str, expires_at: int) -> None:
        if expires_at:
            self._expiry[key] = expires_at
            heapq.heappush(self._heap, (expires_at, key))
            if len(self._heap) > 2 * len(self._expiry) + 1024:  # drop stale heap entries
                self._heap = [(t, k) for k, t in self._expiry.items()]
                heapq.heapify(self._heap)
        elif self._expiry:
            self._expiry.pop(key, None)

    def _forget(self, key: str, rec: _Stored | None) -> None:
        self.keys -= 1
        self.total_bytes -= len(rec.value) if rec is not None else 0
        self.observer.memory_counts(self.keys, self.total_bytes)
        self._expiry.pop(key, None)

    # -- caps -------------------------------------------------------------------------
    async def _reserve(self, key: str, new_keys: int, new_bytes: int) -> None:
        """Count a write against the caps before it happens (so concurrent
        writes cannot jointly overshoot); sweeps expired records first if
        the write would not fit."""
        cfg = self.config
        if (
            self.keys + new_keys > cfg.max_keys
            or self.total_bytes + new_bytes > cfg.max_total_bytes
        ):
            if self._heap and self._heap[0][0] <= self._now_ms():
                await self.sweep(skip_busy=True)
            if new_keys and self.keys + new_keys > cfg.max_keys:
                raise LimitExceeded(
                    "memory.max_keys",
                    cfg.max_keys,
                    f"memory holds {self.keys} keys; memory.max_keys is {cfg.max_keys}",
                )
            if new_bytes > 0 and self.total_bytes + new_bytes > cfg.max_total_bytes:
                raise LimitExceeded(
                    "memory.max_total_bytes",
                    cfg.max_total_bytes,
                    f"memory holds {self.total_bytes} bytes of values and this write adds "
                    f"{new_bytes}; memory.max_total_bytes is {cfg.max_total_bytes}",
                )
        self.keys += new_keys
        self.total_bytes += new_bytes
        self.observer.memory_counts(self.keys, self.total_bytes)

    def _release(self, new_keys: int, new_bytes: int) -> None:
        self.keys -= new_keys
        self.total_bytes -= new_bytes
        self.observer.memory_counts(self.keys, self.total_bytes)

    @asynccontextmanager
    async def _key_lock(self, key: str) -> AsyncIterator[None]:
        slot = self._key_locks.get(key)
        if slot is None:
            slot = self._key_locks[key] = [asyncio.Lock(), 0]
        slot[1] += 1
        try:
            async with slot[0]:
                yield
        finally:
            slot[1] -= 1
            if not slot[1]:
                del self._key_locks[key]


__all__ = [
    "Memory",
    "MemoryBackend",
    "MemoryPage",
    "MemoryRecord",
    "StoreMemory",
    "validate_key",
    "validate_prefix",
]
