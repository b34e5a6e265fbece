"""The keys that tie forks to their ancestors (see :mod:`.forks`), and what
the purge of a deleted incarnation removes given them."""

from __future__ import annotations

from typing import Any

from ctxd_sidecar.core.contexts.model import ContextState, SegmentRef
from ctxd_sidecar.core.contexts.persistence import (
    SEGMENTS,
    ContextStore,
    decode,
    seg_key,
    seg_owner,
    seg_prefix,
)

#: ``context-ref/<ancestor>/<gen>/<fork>~<gen>``: a fork reads this ancestor's segments.
REFS = "context-ref"
#: ``context-fork/<fork>/<gen>``: the fork's lineage, for its purge.
FORKS = "context-fork"
#: ``context-forked/<ancestor>/<gen>``: it was forked (stores that cannot list).
FORKED = "context-forked"


async def lineage_keys(storage: Any, st: ContextState) -> list[str]:
    """The keys tying an incarnation to its forks and ancestors, and the
    segments it inherited (a migration copies them with it, so a migrated
    fork is still a fork, readable before and without its ancestors)."""
    cid, gen = st.id, st.gen
    keys = [f"{FORKS}/{cid}/{gen}", f"{FORKED}/{cid}/{gen}"]
    if storage.can_list:
        keys += await storage.list(f"{REFS}/{cid}/{gen}/")
    for seg in [*st.segments, *(a for a, _ in st.archive)]:
        owner = seg_owner(st, seg)
        if owner != (cid, gen):
            keys.append(seg_key(*owner, seg))
    return keys


async def purge_keys(store: ContextStore, cid: str, gen: str, plan: dict[str, Any]) -> list[str]:
    """The keys of a deleted incarnation (its trash ``plan``) to remove: its
    own, less its segments while forks read them, plus its references to its
    ancestors and the segments of a deleted ancestor no other fork reads."""
    segments = [SegmentRef.from_list(s) for s in plan["segments"]]
    keys = await store.keys_of(cid, gen, int(plan["last"]), segments)
    storage = store.storage
    if storage.can_list:
        forked = bool(await storage.list(f"{REFS}/{cid}/{gen}/"))
    else:
        forked = await storage.get(f"{FORKED}/{cid}/{gen}") is not None
    out = [k for k in keys if not k.startswith(f"{SEGMENTS}/{cid}/{gen}/")] if forked else keys
    item = await storage.get(f"{FORKS}/{cid}/{gen}")
    if item is None:
        return out
    out = [*out, f"{FORKS}/{cid}/{gen}"]
    for aid, agen, _ in decode(item.value, f"lineage of context {cid}"):
        ref = f"{REFS}/{aid}/{agen}/{cid}~{gen}"
        out.append(ref)
        if not storage.can_list:
            continue
        others = [k for k in await storage.list(f"{REFS}/{aid}/{agen}/") if k != ref]
        head = await store.read_head(aid)
        if not others and (head is None or head[0].get("gen") != agen):
            out += await storage.list(seg_prefix(aid, agen))
    return out
