"""Write ids for S3's conditional writes, so a write's outcome is known.

Every write stores a fresh id (``x-amz-meta-ctxd-write``) and the ids of the
writes it replaced, newest first (``x-amz-meta-ctxd-before``, at most
:data:`HISTORY` of them, ending in :data:`CREATED` when the chain reaches
the object's creation). When a conditional PUT fails without an answer (the
connection dropped after the request was sent, a 5xx), the store reads the
object's metadata and :func:`judge` tells, by id alone, whether the write was
applied (it is the object, or one of the writes that replaced it), was
refused (the chain back to the version it expected does not hold it), or is
still pending (the object is still that version: send it again). Content is
never evidence: two writers may send identical bytes at the same moment.
"""

from __future__ import annotations

import enum
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

#: Metadata keys (S3 returns user metadata keys in lower case).
WRITE_ID = "ctxd-write"
BEFORE = "ctxd-before"
#: Predecessor ids kept per object: 16 x 33 bytes, well inside S3's 2 KB.
HISTORY = 16
#: Last entry of a chain that reaches the creation of the object.
CREATED = "0"
#: (key, version) pairs whose chain is remembered for the next write.
REMEMBERED = 8192


class Outcome(enum.Enum):
    APPLIED = "applied"
    REFUSED = "refused"
    PENDING = "pending"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Lineage:
    """A write's id and the ids of the writes it replaces, newest first."""

    write_id: str
    before: tuple[str, ...]

    def metadata(self) -> dict[str, str]:
        return {WRITE_ID: self.write_id, BEFORE: " ".join(self.before)}

    def chain(self) -> tuple[str, ...]:
        return (self.write_id, *self.before)


def identity(etag: str, metadata: Mapping[str, str]) -> str:
    """The object's write id; the ETag stands in for objects written without one."""
    return metadata.get(WRITE_ID) or "e" + etag.strip('"')


def chain_of(etag: str, metadata: Mapping[str, str]) -> tuple[str, ...]:
    return (identity(etag, metadata), *metadata.get(BEFORE, "").split())


class Lineages:
    """The chains of versions this store read or wrote, so a write knows the
    ids of what it replaces without another request."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self._chains: OrderedDict[tuple[str, str], tuple[str, ...]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def _put(self, key: str, etag: str, chain: tuple[str, ...]) -> None:
        with self._lock:
            self._chains[(key, etag)] = chain
            self._chains.move_to_end((key, etag))
            while len(self._chains) > self._size:
                self._chains.popitem(last=False)

    def seen(self, key: str, etag: str, metadata: Mapping[str, str]) -> None:
        self._put(key, etag, chain_of(etag, metadata))

    def remember(self, key: str, etag: str, lineage: Lineage) -> None:
        self._put(key, etag, lineage.chain())

    def new_write(self, key: str, if_version: str | None, *, created: bool = False) -> Lineage:
        """A fresh id for a write replacing ``if_version`` (``created``: an
        if-absent write; neither: an unconditional one, replacing we know not what)."""
        if created:
            before: tuple[str, ...] = (CREATED,)
        elif if_version is None:
            before = ()
        else:
            with self._lock:
                known = self._chains.get((key, if_version))
            before = known[:HISTORY] if known else (identity(if_version, {}),)
        return Lineage(uuid.uuid4().hex, before)


def judge(
    lineage: Lineage,
    etag: str | None,
    metadata: Mapping[str, str] | None,
    *,
    if_version: str | None,
    if_absent: bool,
) -> Outcome:
    """What became of the write ``lineage`` describes, from the object now
    (``etag`` None: there is none)."""
    if etag is None or metadata is None:
        # Absent: an if-absent write was not applied yet. An if-match write
        # found its version deleted: applied and then deleted, or not: the
        # object no longer says.
        return Outcome.PENDING if if_absent else Outcome.UNKNOWN
    chain = chain_of(etag, metadata)
    if lineage.write_id in chain:
        return Outcome.APPLIED
    if if_version is not None and etag == if_version:
        return Outcome.PENDING  # still the version the write expects
    # Changed by someone else. Had our write been applied, it would be in the
    # chain between the object and the version we expected: if the chain
    # reaches back that far without it, it was not.
    # A chain ending at the creation is complete: every write since is in it.
    base = CREATED if if_absent else lineage.before[0] if lineage.before else CREATED
    if base in chain or chain[-1] == CREATED:
        return Outcome.REFUSED
    return Outcome.UNKNOWN
