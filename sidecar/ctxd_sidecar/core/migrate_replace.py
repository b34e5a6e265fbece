"""``ctxd migrate --overwrite``: replace one context at the destination whole.

The head is the commit point. Until the source's head replaces the
destination's (one write), the destination's copy keeps answering: as it was,
or as a shorter prefix of itself. So a run stopped anywhere leaves the
context readable, and the next run converges. In order:

1. the source's segments (new keys, or keys the destination copy does not
   read under its own head);
2. the records past the source's last version, newest first, so what remains
   of the destination's tail is always a prefix (these are what would be read
   on top of the source's head);
3. the source's log tail (the records its head does not cover), oldest first;
4. the head;
5. the source's older records (covered by its head, so never read), so the
   destination holds exactly the source's bytes;
6. every other key of the context (an earlier incarnation's, segments only
   the old head named): removed.
"""

from __future__ import annotations

from typing import Any, Protocol

from ctxd_sidecar.core.contexts.model import SegmentRef
from ctxd_sidecar.core.contexts.persistence import (
    ContextStore,
    decode,
    head_key,
    log_key,
    seg_key,
)
from ctxd_sidecar.core.errors import CtxdError
from ctxd_sidecar.core.storage import Storage
from ctxd_sidecar.plugin.store import Item


class KeyCounts(Protocol):
    """The counters of a migration's report that replacing a context moves."""

    keys_copied: int
    keys_already_present: int
    keys_overwritten: int
    keys_removed: int


class Migration(Protocol):
    """What replacing a context needs of the running migration
    (:class:`ctxd_sidecar.core.migrate.Migration`)."""

    src: Storage
    dst: Storage
    dst_contexts: ContextStore
    report: KeyCounts


def _segment_keys(cid: str, doc: dict[str, Any]) -> set[str]:
    gen = doc["gen"]
    refs = [SegmentRef.from_list(s) for s in doc.get("segments", ())]
    refs += [SegmentRef.from_list(a[:4]) for a in doc.get("archive", ())]
    return {seg_key(cid, gen, ref) for ref in refs}


async def _tail_keys(m: Migration, cid: str, gen: str, after: int) -> list[str]:
    """Log records of ``gen`` at the destination past version ``after``,
    up to the first gap (what a restore would read after that version)."""
    out, v = [], after + 1
    while await m.dst.get(log_key(cid, gen, v)) is not None:
        out.append(log_key(cid, gen, v))
        v += 1
    return out


async def _destination_keys(m: Migration, cid: str, head: Item | None) -> set[str]:
    """Every key of ``cid`` the destination holds that a head could name."""
    if head is None:
        return set()
    try:
        doc = decode(head.value, f"head of context {cid}")
        gen, version = doc["gen"], int(doc["version"])
    except (CtxdError, KeyError, TypeError, ValueError):
        return set()  # not a head we can read: replaced, its keys left alone
    keys = set(await m.dst_contexts.keys_of(cid, gen, version, []))
    keys |= set(await _tail_keys(m, cid, gen, version))
    try:
        keys |= _segment_keys(cid, doc)
    except (KeyError, TypeError, ValueError):
        pass
    return keys


async def _put(m: Migration, key: str, value: bytes) -> None:
    current = await m.dst.get(key)
    if current is not None and current.value == value:
        m.report.keys_already_present += 1
        return
    await m.dst.put(key, value)
    if current is None:
        m.report.keys_copied += 1
    else:
        m.report.keys_overwritten += 1


async def _remove(m: Migration, key: str) -> None:
    if await m.dst.get(key) is not None:
        await m.dst.delete(key)
        m.report.keys_removed += 1


async def replace_context(m: Migration, cid: str, head: Item, state, keys: list[str]) -> None:
    """Make the destination's ``cid`` exactly the source's (see module doc)."""
    doc = decode(head.value, f"head of context {cid}")
    head_version = int(doc["version"])
    source: dict[str, bytes] = {}
    for key in sorted(set(keys) | _segment_keys(cid, doc)):
        item = await m.src.get(key)
        if item is not None:
            source[key] = item.value
    old_head = await m.dst.get(head_key(cid))
    old_keys = await _destination_keys(m, cid, old_head)
    records = [log_key(cid, state.gen, v) for v in range(1, state.version + 1)]
    tail = [k for k in records[head_version:] if k in source]
    covered = [k for k in records[:head_version] if k in source]
    segments = [k for k in source if k not in set(records)]

    for key in segments:  # 1
        await _put(m, key, source[key])
    beyond = await _tail_keys(m, cid, state.gen, state.version)
    for key in reversed(beyond):  # 2
        await _remove(m, key)
    for key in tail:  # 3
        await _put(m, key, source[key])
    if old_head is None or old_head.value != head.value:  # 4
        await m.dst.put(head_key(cid), head.value)
        m.report.keys_overwritten += old_head is not None
        m.report.keys_copied += old_head is None
    else:
        m.report.keys_already_present += 1
    for key in covered:  # 5
        await _put(m, key, source[key])
    for key in sorted(old_keys - set(source) - set(beyond), reverse=True):  # 6
        await _remove(m, key)
