"""``lmdb://PATH``: the embedded default store.

One LMDB environment, fsync on every commit, a large sparse map. An
:class:`~ctxd_sidecar.plugin.AsyncStore`: the sidecar awaits ``aput`` and
``adelete`` on its event loop, and the store schedules them. Queued writes
(``queue_put``/``queue_delete``) run on one dedicated thread, which keeps
the event loop off the disk while other calls wait; while nothing else waits
for the loop (the sidecar's ``idle``, see ``bind``) a write commits on it
instead, as ``put`` and ``delete`` do on the calling thread (a commit on a
local disk costs less than two thread hand-offs), unless commits have been
slow lately (:data:`INLINE_WRITE_BUDGET_S`). LMDB allows one write
transaction at a time, so either kind waits for the other. Reads are
memory-mapped and run wherever they are called.

Group commit: writes queued while the writer is busy are applied in one
transaction and made durable by one fsync, and each caller is answered only
after that commit. Each write's precondition is still checked on its own, so
one failed compare-and-set does not fail its neighbours; if the shared
transaction itself fails (e.g. the map is full), every write is retried alone
so only the one at fault fails.

Options (URI query): ``map_size`` (bytes, or with a KiB/MiB/GiB/TiB suffix;
default 64GiB, sparse, so it costs nothing until used).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import lmdb
from pydantic import field_validator

from ctxd_sidecar.plugin import (
    AsyncStore,
    CallStyle,
    Capability,
    Item,
    PreconditionFailed,
    StoreError,
    StoreFull,
    StoreOptions,
    check_precondition,
    content_version,
    store_hooks,
)

DEFAULT_MAP_SIZE = 64 << 30
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"invalid size {text!r}; use bytes or e.g. 64GiB")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


#: Inline writes are paused while their running mean (seconds) exceeds this.
#: A commit on a local disk takes well under it (0.3-1 ms with its fsyncs on
#: a 2-core VM); a disk that takes longer would hold up a call arriving
#: meanwhile for far longer than the thread hand-off it saves (0.1-0.3 ms).
INLINE_WRITE_BUDGET_S = 0.005
#: How long a pause lasts before inline writes are tried (and timed) again.
INLINE_WRITE_PAUSE_S = 30.0
#: Weight of the newest inline write in the running mean.
_INLINE_WEIGHT = 0.2


def _never() -> bool:
    return False


#: Held (flock) by the one process that has the directory open.
LOCK_FILE = "ctxd.lock"


#: Free bytes the LMDB directory's file system needs to create an environment
#: (the lock file and a first commit); less is refused as a full disk.
MIN_FREE_BYTES = 1024 * 1024


def _free_bytes(path: str) -> int | None:
    try:
        fs = os.statvfs(path)
    except OSError:
        return None
    return fs.f_bavail * fs.f_frsize


def _check_room(path: str) -> None:
    """LMDB maps the lock file it creates into memory: on a disk without
    room for it the process would die of SIGBUS instead of saying why. An
    environment that exists opens as before (reads work on a full disk)."""
    new = not all(os.path.exists(os.path.join(path, f)) for f in ("data.mdb", "lock.mdb"))
    free = _free_bytes(path) if new else None
    if free is not None and free < MIN_FREE_BYTES:
        raise StoreFull(f"the disk holding the LMDB environment is full ({free // 1024} KiB free)")


class LmdbStore(AsyncStore):
    name = "lmdb"
    capabilities = frozenset({Capability.LIST, Capability.DELETE, Capability.CONDITIONAL_PUT})
    call_style = frozenset({CallStyle.INLINE_READS})
    max_key_bytes = 511  # LMDB's compiled-in MDB_MAXKEYSIZE
    #: Most writes applied in one group-committed transaction.
    max_batch = 256

    def __init__(self, path: str, map_size: int = DEFAULT_MAP_SIZE) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.map_size = map_size
        _check_room(path)
        self._lock = _exclusive(path)
        try:
            self.env = lmdb.open(
                path,
                map_size=map_size,
                subdir=True,
                sync=True,
                metasync=True,
                max_dbs=0,
                readahead=False,
                max_readers=256,
            )
        except lmdb.Error as exc:
            self._lock.close()
            raise StoreError(f"cannot open LMDB environment: {type(exc).__name__}") from None
        self.env.reader_check()  # clear slots left by crashed processes
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_loop, name="lmdb-writer", daemon=True)
        self._writer.start()
        #: When a write awaited on the event loop may commit there.
        self.inline = InlineWrites()

    # -- reads --------------------------------------------------------------
    def get(self, key: str) -> Item | None:
        with self.env.begin(buffers=False) as txn:
            return _item(txn.get(key.encode()))

    def get_value(self, key: str) -> bytes | None:
        with self.env.begin(buffers=False) as txn:
            return txn.get(key.encode())

    def list(self, prefix, *, start_after="", limit=None) -> list[str]:
        bprefix, bafter = prefix.encode(), start_after.encode()
        out: list[str] = []
        with self.env.begin() as txn, txn.cursor() as cur:
            if not cur.set_range(max(bprefix, bafter)):
                return out
            for key in cur.iternext(keys=True, values=False):
                if not key.startswith(bprefix) or (limit is not None and len(out) >= limit):
                    break
                if key == bafter:
                    continue
                out.append(key.decode())
        return out

    # -- writes -----------------------------------------------------------------
    def put(self, key, value, *, if_version=None, if_absent=False) -> str:
        """Commit one put on the calling thread."""
        with self._write_txn() as txn:
            return _put(txn, key.encode(), bytes(value), if_version, if_absent)

    def put_many(self, writes) -> list[str]:
        """Commit a group of puts in one transaction on the calling thread, all or none."""
        with self._write_txn() as txn:
            return _put_group(txn, writes)

    def delete(self, key, *, if_version=None) -> None:
        """Commit one delete on the calling thread."""
        with self._write_txn() as txn:
            _delete(txn, key.encode(), if_version)

    def queue_put(self, key, value, *, if_version=None, if_absent=False):
        """Queue one put to the writer thread: a future of the running loop
        (a thread future off a loop), answered after its group's commit."""
        return self._submit(_put, key.encode(), bytes(value), if_version, if_absent)

    def queue_delete(self, key, *, if_version=None):
        """Queue one delete to the writer thread (the futures of :meth:`queue_put`)."""
        return self._submit(_delete, key.encode(), if_version)

    # -- writes on the sidecar's event loop ----------------------------------------------
    def bind(self, idle: Callable[[], bool]) -> None:
        self.inline.idle = idle

    async def aput(self, key, value, *, if_version=None, if_absent=False) -> str:
        if self.inline.now():
            with self.inline.timed():
                return self.put(key, value, if_version=if_version, if_absent=if_absent)
        return await self.queue_put(key, value, if_version=if_version, if_absent=if_absent)

    async def aput_many(self, writes) -> list[str]:
        if self.inline.now():
            with self.inline.timed():
                return self.put_many(writes)
        # One queued write: the group shares the writer's next commit, all or none.
        return await self._submit(_put_group, list(writes))

    async def adelete(self, key, *, if_version=None) -> None:
        if self.inline.now():
            with self.inline.timed():
                return self.delete(key, if_version=if_version)
        await self.queue_delete(key, if_version=if_version)

    def _submit(self, fn, *args) -> asyncio.Future | concurrent.futures.Future:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        write = _Write(fn, args, loop)
        self._queue.put(write)
        return write.future

    def _write_loop(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            # A caller that gave up (cancelled) before its write started is
            # dropped; a write that started is applied whatever its caller does.
            batch = [write for write in batch if write.start()]
            if not batch:
                continue
            try:
                self._commit(batch)
            except StoreError:
                # The shared transaction failed: retry alone so only the
                # write at fault fails.
                for write in batch:
                    try:
                        self._commit([write])
                    except StoreError as exc:
                        write.outcome = (None, exc)
            _report(batch)

    def _commit(self, batch: list[_Write]) -> None:
        """Apply ``batch`` in one transaction. Outcomes are recorded on each
        write and reported by the caller only after the commit (and its
        fsync) returned."""
        with self._write_txn() as txn:
            for write in batch:
                try:
                    write.outcome = (write.fn(txn, *write.args), None)
                except PreconditionFailed as exc:
                    write.outcome = (None, exc)

    @contextlib.contextmanager
    def _write_txn(self) -> Iterator[lmdb.Transaction]:
        """A write transaction, committed (and fsync'd) when the block ends;
        LMDB's errors become store errors. An exception from the block
        aborts it."""
        try:
            with self.env.begin(write=True) as txn:
                yield txn
        except lmdb.MapFullError:
            raise StoreFull(
                f"LMDB map is full ({self.map_size} bytes); raise map_size in the store URI"
            ) from None
        except lmdb.ReadonlyError:
            raise StoreError("LMDB environment is read-only") from None
        except lmdb.Error as exc:
            if self._disk_full(exc):
                raise StoreFull("the disk holding the LMDB environment is full") from None
            raise StoreError(f"LMDB write failed: {type(exc).__name__}") from None

    def _disk_full(self, exc: lmdb.Error) -> bool:
        """LMDB reports a full disk in several shapes (ENOSPC on commit, EIO
        when a page cannot be written); the file system's free space decides."""
        if "No space left" in str(exc):
            return True
        free = _free_bytes(self.path)
        return free is not None and free < MIN_FREE_BYTES

    # -- lifecycle ------------------------------------------------------------
    def flush(self) -> None:
        self.env.sync(True)

    def close(self) -> None:
        self._queue.put(None)
        self._writer.join()
        self.env.close()
        self._lock.close()  # releases the directory for the next sidecar

    def describe(self) -> str:
        return f"lmdb (map_size={self.map_size})"


class InlineWrites:
    """Whether a write may commit on the sidecar's event loop right now:
    nothing else waits for the loop (``idle``, the sidecar's answer) and
    inline commits are not paused. While they are slow (a disk that is busy
    or remote) they pause, so queued writes keep the loop free."""

    def __init__(self) -> None:
        self.idle: Callable[[], bool] = _never
        self.budget = INLINE_WRITE_BUDGET_S
        self.pause = INLINE_WRITE_PAUSE_S
        #: Writes committed on the event loop so far.
        self.commits = 0
        self._mean = 0.0
        self._paused_until = 0.0

    def now(self) -> bool:
        return time.perf_counter() >= self._paused_until and self.idle()

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.commits += 1
            self._mean += (time.perf_counter() - started - self._mean) * _INLINE_WEIGHT
            if self._mean > self.budget:
                self._paused_until = time.perf_counter() + self.pause
                self._mean = 0.0


class _Write:
    """One queued write: what to apply, and the future its caller awaits. A
    caller on an event loop gets that loop's future, so a group commit wakes
    each loop once for all of its writes instead of once per write."""

    __slots__ = ("fn", "args", "loop", "future", "outcome")

    def __init__(self, fn, args: tuple, loop: asyncio.AbstractEventLoop | None) -> None:
        self.fn = fn
        self.args = args
        self.loop = loop
        self.future: asyncio.Future | concurrent.futures.Future = (
            concurrent.futures.Future() if loop is None else loop.create_future()
        )
        self.outcome: tuple[Any, BaseException | None] = (None, None)

    def start(self) -> bool:
        """False when the caller already gave up (then the write is dropped)."""
        if self.loop is None:
            return self.future.set_running_or_notify_cancel()
        # Read across threads: a cancel racing this check lets the write apply,
        # as a cancel arriving once it started would.
        return not self.future.cancelled()

    def settle(self) -> None:
        if self.future.cancelled():
            return
        result, error = self.outcome
        if error is None:
            self.future.set_result(result)
        else:
            self.future.set_exception(error)


def _report(batch: list[_Write]) -> None:
    """Complete every write of a committed batch: thread futures here, and
    each event loop's futures in one callback on that loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Write]] = {}
    for write in batch:
        if write.loop is None:
            write.settle()
        else:
            by_loop.setdefault(write.loop, []).append(write)
    for loop, writes in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_all, writes)
        except RuntimeError:
            pass  # that loop is closed: nothing awaits these any more


def _settle_all(writes: list[_Write]) -> None:
    for write in writes:
        write.settle()


def _exclusive(path: str):
    """Hold ``<path>/ctxd.lock`` for as long as the store is open. LMDB lets
    several processes share an environment, but each sidecar keeps its own
    cache and counters: a second sidecar on the directory must not start."""
    try:
        fh = open(os.path.join(path, LOCK_FILE), "a+b")  # noqa: SIM115 - held open
    except OSError as exc:
        raise StoreError(f"cannot use the LMDB directory: {exc.strerror}") from None
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise StoreError(
            "the LMDB directory is in use by another ctxd process (one sidecar per directory)"
        ) from None
    return fh


def _put(txn, key: bytes, value: bytes, if_version: str | None, if_absent: bool) -> str:
    if if_version is not None:
        check_precondition(_item(txn.get(key)), if_version, if_absent)
        txn.put(key, value)
    elif not txn.put(key, value, overwrite=not if_absent):
        # Create-only in one LMDB call rather than a get and a put: py-lmdb
        # releases the GIL around each, and in a busy process every release
        # waits to get it back.
        raise PreconditionFailed("key already exists")
    return content_version(value)


def _put_group(txn, writes) -> list[str]:
    """Every precondition checked (in order, each seeing the group's earlier
    puts) before anything is written: a refused group writes nothing."""
    pending: dict[bytes, bytes] = {}
    versions = []
    for w in writes:
        key, value = w.key.encode(), bytes(w.value)
        if w.if_version is not None or w.if_absent:
            current = pending[key] if key in pending else txn.get(key)
            check_precondition(_item(current), w.if_version, w.if_absent)
        pending[key] = value
        versions.append(content_version(value))
    for key, value in pending.items():
        txn.put(key, value)
    return versions


def _delete(txn, key: bytes, if_version: str | None) -> None:
    if if_version is not None:
        check_precondition(_item(txn.get(key)), if_version, False)
    txn.delete(key)


def _item(value: bytes | None) -> Item | None:
    return None if value is None else Item(value, content_version(value))


class LmdbOptions(StoreOptions):
    """URI query options of an ``lmdb://`` store (all optional)."""

    #: Largest the environment may grow: bytes, or e.g. ``64GiB``.
    map_size: int = DEFAULT_MAP_SIZE

    @field_validator("map_size", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        return parse_size(value) if isinstance(value, str) else value


def _open(uri: str, options: LmdbOptions) -> LmdbStore:
    parts = urlsplit(uri)
    path = unquote(parts.netloc + parts.path)
    if not path:
        raise ValueError("lmdb store URI needs a path, e.g. lmdb:///var/lib/ctxd")
    return LmdbStore(path, map_size=options.map_size)


ctxd_store_schemes, ctxd_open_store = store_hooks("lmdb", _open, LmdbOptions)
