"""The store interface every backend plugin implements.

Deliberately small: ``get``, conditional ``put``, and the optional ``delete``
and ``list`` that a backend declares in :attr:`Store.capabilities`. Every
convenience (key namespacing, async calls, tombstones, the list index for
backends that cannot enumerate) lives in the sidecar, so a plugin author
writes only what their backend does.

Methods are synchronous and may block; the sidecar calls them from worker
threads (reads inline for backends whose :attr:`Store.call_style` says
:attr:`CallStyle.INLINE_READS`). A backend that schedules its own writes
(a writer thread, group commit) subclasses :class:`AsyncStore` instead, as
fsspec's ``AsyncFileSystem`` stands beside its ``AbstractFileSystem``: the
sidecar then awaits its ``aput``/``adelete`` on the event loop.
Keys are arbitrary non-empty UTF-8 strings already namespaced by the sidecar;
values are bytes (possibly empty). :mod:`ctxd_sidecar.testing.store_conformance` checks
a backend against this contract; ``examples/store-plugin`` is a complete
third-party plugin. A plugin module makes its two hooks with
:func:`ctxd_sidecar.plugin.store_hooks`, and backends that compare and set
themselves share :func:`check_precondition` and :func:`content_version`.
"""

from __future__ import annotations

import abc
import enum
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple


class Capability(enum.StrEnum):
    """What a store can do beyond get/put; the sidecar reads, never probes."""

    #: ``list()`` enumerates keys by prefix in lexicographic (byte) order.
    LIST = "list"
    #: ``delete()`` removes a key. Without it the sidecar writes tombstones.
    DELETE = "delete"
    #: ``put(if_version=…, if_absent=…)`` and ``delete(if_version=…)`` are
    #: atomic compare-and-set, safe across processes sharing the backend, and
    #: their answer is what happened: a refused write was not applied and an
    #: acknowledged one was, once, even if its reply was lost and it was sent
    #: again, and even when racing writers send identical bytes.
    #: Without it the sidecar checks preconditions itself under an in-process
    #: lock, which is only safe while one sidecar uses the store.
    CONDITIONAL_PUT = "conditional_put"
    #: Several sidecar processes may use the backend at once (a bucket shared
    #: by replicas). The sidecar then checks the store on every read of a
    #: context, so each replica serves what any replica acknowledged.
    SHARED = "shared"
    #: ``watch(prefix, callback)`` calls ``callback(key)`` soon after any
    #: process sharing the backend writes or deletes a key under ``prefix``
    #: (e.g. PostgreSQL's LISTEN/NOTIFY). A hint, not a log: ``callback(None)``
    #: means "anything may have changed" (after a lost connection). The
    #: sidecar then wakes watchers at once instead of polling.
    CHANGE_FEED = "change_feed"


class CallStyle(enum.StrEnum):
    """How a store likes to be called (not what it can do): hints the
    sidecar reads to choose between its event loop and worker threads."""

    #: Reads are local and cheap (memory or mmap): the sidecar may call
    #: ``get`` on its event loop instead of in a worker thread.
    INLINE_READS = "inline_reads"


@dataclass(frozen=True, slots=True)
class Item:
    """A stored value and its opaque version.

    The version changes whenever the content changes; two writes of
    identical bytes may share one (S3 ETags behave this way). A version
    therefore names content, not a write: a compare-and-set on it succeeds
    when the key holds exactly the bytes the caller read, which loses no
    update (the state replaced is the state read). It must never be used,
    nor the content, to decide whether a write was one's own: a store that
    retries a conditional write after an unanswered attempt tells its own
    write by something unique to it (S3: a write id stored as metadata).
    """

    value: bytes
    version: str


class Write(NamedTuple):
    """One put of a group written with :meth:`AsyncStore.put_many`, with
    :meth:`Store.put`'s preconditions."""

    key: str
    value: bytes
    if_version: str | None = None
    if_absent: bool = False


class StoreError(Exception):
    """Base of the errors a store raises. Messages must not carry secrets."""


class PreconditionFailed(StoreError):
    """A conditional put or delete found a different version (or none)."""


class StoreFull(StoreError):
    """The backend is out of space (e.g. LMDB map full)."""


class StoreUnavailable(StoreError):
    """The backend cannot be reached or keeps failing; the call may be retried."""


class Store(abc.ABC):
    """A key/value backend. Subclass it in a plugin and return it from
    :func:`ctxd_sidecar.plugin.spec.ctxd_open_store`."""

    #: Backend label used in logs and metrics (e.g. ``"lmdb"``).
    name: ClassVar[str] = "store"
    #: What this backend can do beyond get/put (may be set per instance, as
    #: options decide).
    capabilities: frozenset[Capability] = frozenset()
    #: How it likes to be called (hints; none means worker threads for all).
    call_style: frozenset[CallStyle] = frozenset()
    #: Longest key the backend accepts, in UTF-8 bytes (``None``: no limit).
    #: The sidecar rejects longer keys with a clear error before calling.
    #: May be set per instance (e.g. S3 less the store's own key prefix).
    max_key_bytes: int | None = None

    @abc.abstractmethod
    def get(self, key: str) -> Item | None:
        """Return the item stored under ``key``, or ``None``."""

    def get_value(self, key: str) -> bytes | None:
        """The value stored under ``key`` without its version, or ``None``.

        For reads that never compare versions (a restore reading megabytes
        of segments); a backend that derives versions from the content
        (:func:`content_version`) overrides it to skip that work."""
        item = self.get(key)
        return None if item is None else item.value

    @abc.abstractmethod
    def put(
        self,
        key: str,
        value: bytes,
        *,
        if_version: str | None = None,
        if_absent: bool = False,
    ) -> str:
        """Store ``value`` and return its new version.

        With ``if_absent`` the write happens only when ``key`` does not exist;
        with ``if_version`` only when the stored version equals it. Otherwise
        :class:`PreconditionFailed`. Preconditions are only passed to stores
        declaring :attr:`Capability.CONDITIONAL_PUT`; a store without it
        raises :class:`NotImplementedError` if given one, never ignores it
        (checked by :mod:`ctxd_sidecar.testing.store_conformance`).
        """

    def delete(self, key: str, *, if_version: str | None = None) -> None:
        """Remove ``key`` (a missing key is not an error unless ``if_version``
        is given, which then fails with :class:`PreconditionFailed`).
        Requires DELETE."""
        raise NotImplementedError(f"{self.name} does not declare DELETE")

    def list(self, prefix: str, *, start_after: str = "", limit: int | None = None) -> list[str]:
        """Keys starting with ``prefix`` and greater than ``start_after``, in
        order, at most ``limit`` of them. Requires LIST."""
        raise NotImplementedError(f"{self.name} does not declare LIST")

    def watch(self, prefix: str, callback: Callable[[str | None], None]) -> Callable[[], None]:
        """Call ``callback`` (on a thread of the store's, so it must be quick
        and thread-safe) with each key written or deleted under ``prefix``;
        returns a function that stops it. Requires CHANGE_FEED."""
        raise NotImplementedError(f"{self.name} does not declare CHANGE_FEED")

    def flush(self) -> None:  # noqa: B027 - optional hook
        """Make every acknowledged write durable (called on shutdown)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources. The store is not used afterwards."""

    def describe(self) -> str:
        """A short description for logs, without credentials."""
        return self.name


class AsyncStore(Store):
    """A store that schedules its own writes: the sidecar awaits
    :meth:`aput` and :meth:`adelete` on its event loop instead of running
    ``put``/``delete`` in a worker thread.

    For a backend with a writer of its own (LMDB's one write transaction at
    a time, group-committed on a thread of the store's); a store that only
    blocks is a plain :class:`Store`. ``put`` and ``delete`` stay: tools,
    the migration and the conformance suite call them off the loop. Both
    coroutines run on the sidecar's one event loop, must not block it for
    longer than a local commit, and have ``put``'s and ``delete``'s
    preconditions, errors and returns."""

    def bind(self, idle: Callable[[], bool]) -> None:  # noqa: B027 - optional hook
        """Called once by the sidecar before its first write: ``idle()``,
        asked on the event loop, says whether nothing but the caller waits
        for the loop (no other request in flight). A store may then commit
        inline when that costs less than a hand-off to its own thread."""

    @abc.abstractmethod
    async def aput(
        self, key: str, value: bytes, *, if_version: str | None = None, if_absent: bool = False
    ) -> str:
        """:meth:`Store.put`, awaited on the sidecar's event loop."""

    @abc.abstractmethod
    async def adelete(self, key: str, *, if_version: str | None = None) -> None:
        """:meth:`Store.delete`, awaited on the sidecar's event loop (stores
        without DELETE raise :class:`NotImplementedError`)."""

    def put_many(self, writes: list[Write]) -> list[str]:
        """Puts applied in order (a checkpoint's segments, then the head
        naming them, its precondition last), their versions in order. A
        failed precondition raises :class:`PreconditionFailed`. A store
        whose writes group overrides it to commit them in one transaction,
        all or none; by default each is a :meth:`Store.put` in turn, so the
        puts before a refused one stay."""
        return [
            self.put(w.key, w.value, if_version=w.if_version, if_absent=w.if_absent) for w in writes
        ]

    async def aput_many(self, writes: list[Write]) -> list[str]:
        """:meth:`put_many`, awaited on the sidecar's event loop; by
        default each :meth:`aput` is awaited in turn."""
        return [
            await self.aput(w.key, w.value, if_version=w.if_version, if_absent=w.if_absent)
            for w in writes
        ]


# -- conveniences for plugin authors ------------------------------------------------------
def content_version(value: bytes) -> str:
    """A version derived from the content: changes whenever the bytes do.
    For backends with no version of their own (files, LMDB, memory)."""
    return hashlib.blake2b(value, digest_size=12).hexdigest()


def check_precondition(current: Item | None, if_version: str | None, if_absent: bool) -> None:
    """Raise :class:`PreconditionFailed` unless a write with these
    preconditions may replace ``current`` (``None``: the key is absent).

    The one statement of the ``if_absent``/``if_version`` semantics, for
    backends that compare and set under a lock or transaction of their own.
    """
    if if_absent and current is not None:
        raise PreconditionFailed("key already exists")
    if if_version is not None and (current is None or current.version != if_version):
        raise PreconditionFailed("version does not match")
