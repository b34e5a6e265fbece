"""The sidecar's view of a store: namespaced keys, async calls, tombstones.

Domain code never talks to a :class:`ctxd_sidecar.plugin.store.Store` directly. It uses a
:class:`Storage`, which

* prefixes every key with ``<prefix>/<instance>/`` so one bucket or LMDB
  environment can hold many instances and nothing outside this instance is
  reachable;
* runs blocking store calls in worker threads (or inline for stores that
  declare ``INLINE_READS``), so the event loop never waits on disk or network;
  an :class:`~ctxd_sidecar.plugin.store.AsyncStore` schedules its own writes
  and is awaited instead (told, by ``idle``, when nothing else waits for the
  loop);
* serves DELETE with tombstones on stores that cannot delete;
* turns store errors into domain errors;
* reports every store call to a :class:`~ctxd_sidecar.core.observe.StoreObserver`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from collections.abc import Callable
from typing import TypeVar

from ctxd_sidecar.core.errors import Conflict, InvalidArgument, LimitExceeded, Unavailable
from ctxd_sidecar.core.localcas import CHANGED, LocalCas
from ctxd_sidecar.core.observe import NullObserver, StoreObserver
from ctxd_sidecar.plugin.store import (
    AsyncStore,
    CallStyle,
    Capability,
    Item,
    PreconditionFailed,
    Store,
    StoreError,
    StoreFull,
    StoreUnavailable,
    Write,
)

T = TypeVar("T")

#: Written in place of a value on stores without DELETE; never a valid record.
TOMBSTONE = b"\x00ctxd:tombstone"


def _never() -> bool:
    return False


class Storage:
    def __init__(
        self,
        store: Store,
        *,
        prefix: str = "ctxd",
        instance: str = "default",
        workers: int = 16,
        observer: StoreObserver | None = None,
        idle: Callable[[], bool] = _never,
    ) -> None:
        if not instance or "/" in instance:
            # Instance "a" would otherwise list every key of instance "a/b".
            raise ValueError("instance must be a non-empty name without '/'")
        self.store = store
        self.namespace = f"{prefix.strip('/')}/{instance}/" if prefix.strip("/") else f"{instance}/"
        self.observer = observer or NullObserver()
        self.capabilities = caps = frozenset(store.capabilities)
        style = frozenset(store.call_style)
        self.can_list = Capability.LIST in caps
        self.can_delete = Capability.DELETE in caps
        self.can_cas = Capability.CONDITIONAL_PUT in caps
        self.shared = Capability.SHARED in caps
        #: Set when a write found the store full; cleared by
        #: :meth:`make_room` (the health probe's) once a large write fits.
        self.full = False
        #: Reads are cheap enough to run on the event loop, one after another.
        self.inline_reads = CallStyle.INLINE_READS in style
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="store")
        #: Preconditions checked here for a store without CONDITIONAL_PUT.
        self._local = LocalCas(self._get_full)
        #: Writes the store schedules itself (an AsyncStore), awaited on the loop.
        self._awaited: dict[Callable, Callable] = {}
        if isinstance(store, AsyncStore):
            # Whether nothing but the caller waits for the event loop (the
            # server's admission gate answers): the store may then commit inline.
            store.bind(idle)
            names = ("put", "delete", "put_many")
            self._awaited = {getattr(store, n): getattr(store, "a" + n) for n in names}

    @property
    def backend(self) -> str:
        return self.store.name

    # -- key handling ----------------------------------------------------------
    def full_key(self, key: str) -> str:
        full = self.namespace + key
        limit = self.store.max_key_bytes
        if limit is not None and len(full.encode()) > limit:
            room = limit - len(self.namespace.encode())
            raise InvalidArgument(
                "key", f"too long for the {self.backend} store (at most {room} bytes of UTF-8)"
            )
        return full

    def key_room(self, reserved: int = 0) -> int | None:
        """Bytes left for a relative key after the namespace (None: unlimited)."""
        limit = self.store.max_key_bytes
        return None if limit is None else limit - len(self.namespace.encode()) - reserved

    # -- calls --------------------------------------------------------------------
    async def _call(self, fn: Callable[..., T], *args, **kwargs) -> T:
        loop = asyncio.get_running_loop()
        op = getattr(fn, "__name__", "call")
        started = time.perf_counter()
        error: str | None = None
        try:
            awaited = self._awaited.get(fn)
            if awaited is not None:
                # The store schedules the write: await it instead of parking
                # a worker thread on it.
                return await awaited(*args, **kwargs)
            return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))
        except PreconditionFailed:
            raise Conflict(CHANGED) from None
        except StoreFull as exc:
            error = "full"
            self.full = True
            raise LimitExceeded("store_capacity", 0, str(exc)) from None
        except StoreUnavailable as exc:
            error = "unavailable"
            raise Unavailable(f"store unavailable: {exc}") from None
        except StoreError as exc:
            error = "error"
            raise Unavailable(f"store error: {exc}") from None
        finally:
            self.observer.store_op(self.backend, op, time.perf_counter() - started, error)

    async def get(self, key: str) -> Item | None:
        return await self._get_full(self.full_key(key))

    async def _get_full(self, full: str) -> Item | None:
        if self.inline_reads:
            item = self._inline(self.store.get, full)
        else:
            item = await self._call(self.store.get, full)
        return None if item is None or self._tombstone(item.value) else item

    async def get_value(self, key: str) -> bytes | None:
        """The value alone, for reads that never compare versions: an inline
        store may then skip deriving one (LMDB hashes the content)."""
        full = self.full_key(key)
        if not self.inline_reads:
            item = await self._get_full(full)
            return None if item is None else item.value
        value = self._inline(self.store.get_value, full)
        return None if value is None or self._tombstone(value) else value

    def _inline(self, read, full: str):
        """A read on the calling thread (stores that declare INLINE_READS)."""
        try:
            return read(full)
        except StoreError as exc:
            raise Unavailable(f"store error: {exc}") from None

    def _tombstone(self, value: bytes) -> bool:
        """On a store without DELETE, a deleted record is its tombstone."""
        return not self.can_delete and value == TOMBSTONE

    async def put(
        self, key: str, value: bytes, *, if_version: str | None = None, if_absent: bool = False
    ) -> str:
        """Write; with a precondition this raises :class:`Conflict` on a lost race."""
        full = self.full_key(key)
        if not self.can_cas:
            async with self._local.checked(full, if_version, if_absent):
                return await self._call(self.store.put, full, value)
        if if_absent and not self.can_delete:
            # A tombstone counts as absent: compare against it instead.
            current = await self._call(self.store.get, full)
            if current is not None:
                if current.value != TOMBSTONE:
                    raise Conflict("the record already exists")
                return await self._call(self.store.put, full, value, if_version=current.version)
        return await self._call(
            self.store.put, full, value, if_version=if_version, if_absent=if_absent
        )

    async def put_many(self, puts: dict[str, bytes], then: Write | None = None) -> str | None:
        """Unconditional writes, then ``then`` (a head naming them, with its
        precondition): one commit, all or none, where the store groups
        writes; otherwise the puts together, ``then`` after them. Returns
        ``then``'s version (raises :class:`Conflict` when it is refused)."""
        writes = [Write(k, v) for k, v in puts.items()] + ([then] if then else [])
        # (a tombstone counts as absent: only put() compares against one)
        tombstoned = then is not None and then.if_absent and not self.can_delete
        if len(writes) < 2 or not self._awaited or not self.can_cas or tombstoned:
            await asyncio.gather(*(self.put(k, v) for k, v in puts.items()))
            return then and await self.put(
                then.key, then.value, if_version=then.if_version, if_absent=then.if_absent
            )
        full = [Write(self.full_key(w.key), w.value, w.if_version, w.if_absent) for w in writes]
        versions = await self._call(self.store.put_many, full)
        return versions[-1] if then else None

    async def make_room(self, key: str, size: int) -> None:
        """Write ``size`` bytes at ``key``, then delete them. Room for that
        write ends :attr:`full`: a tiny write can fit on a store too full for
        the next real one, so only a write this size counts."""
        await self.put(key, b"\0" * size)
        self.full = False
        await self.delete(key)

    async def delete(self, key: str, *, if_version: str | None = None) -> None:
        full = self.full_key(key)
        if not self.can_cas:
            async with self._local.checked(full, if_version, False):
                await self._remove(full, None)
            return
        await self._remove(full, if_version)

    async def _remove(self, full: str, if_version: str | None) -> None:
        if self.can_delete:
            await self._call(self.store.delete, full, if_version=if_version)
        else:
            await self._call(self.store.put, full, TOMBSTONE, if_version=if_version)

    async def list(
        self, prefix: str, *, start_after: str = "", limit: int | None = None
    ) -> list[str]:
        """Relative keys under ``prefix``. Only on stores with LIST: callers
        check :attr:`can_list` and use :class:`ctxd_sidecar.core.keyindex.KeyIndex`
        otherwise."""
        if not self.can_list:
            raise RuntimeError("store does not declare LIST; use a KeyIndex")
        n = len(self.namespace)
        after = self.namespace + start_after if start_after else ""
        out: list[str] = []
        while limit is None or len(out) < limit:
            want = None if limit is None else limit - len(out)
            keys = await self._call(
                self.store.list, self.namespace + prefix, start_after=after, limit=want
            )
            if self.can_delete:
                return [k[n:] for k in keys]
            # Deleted keys are tombstones here: read each and leave those out.
            items = await asyncio.gather(*(self._get_full(k) for k in keys))
            out.extend(k[n:] for k, item in zip(keys, items, strict=True) if item is not None)
            if want is None or len(keys) < want:
                break
            after = keys[-1]
        return out

    async def run(self, fn: Callable[..., T], *args) -> T:
        """Run a blocking callable in the store's worker pool."""
        return await self._call(fn, *args)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self.store.flush)
        await loop.run_in_executor(self._pool, self.store.close)
        self._pool.shutdown(wait=True)
