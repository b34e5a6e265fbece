"""Copy one instance's contexts and agent memory from one store to another.

Used by ``ctxd migrate --from URI --to URI`` when a deployment outgrows its
store (LMDB on one machine → S3 for a fleet) or leaves one. Both sidecars
must be stopped (or at least not writing) while it runs.

* **Layout-preserving**: keys are copied byte for byte, so what the
  destination restores is exactly what the source held; the destination's
  own ``_index`` records are filled in when it cannot list.
* **Resumable**: every key is written create-only; a key already holding the
  same bytes is skipped, so an interrupted run is simply run again. A key
  holding *different* bytes stops the run (``overwrite`` replaces it).
* **Context by context**: a context's log records and segments are copied
  before its head, so a context only becomes visible at the destination once
  everything its head names is there.
* **Overwrite replaces a context whole** (:mod:`ctxd_sidecar.core.migrate_replace`):
  the destination's copy keeps answering, as it was or as a shorter prefix of
  itself, until the source's head replaces its head in one write; then every
  key of the context the source does not hold is removed. A run stopped at
  any point leaves each context readable, and running again converges.
* **Verified**: every context is restored from the destination and must show
  the source's version and message count; memory key counts must match.
* Expired memory records are skipped.
* **Dry run**: ``dry_run`` reads both stores and counts what a real run would
  copy, skip or overwrite (a conflict is reported, not raised), writing
  nothing; nothing is verified then.
* **Progress**: ``progress(done, total)`` is called after each memory key and
  each context (``total`` is counted from the source's listings first).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ctxd_sidecar.core.contexts import lineage
from ctxd_sidecar.core.contexts.persistence import HEADS, ContextStore, head_key
from ctxd_sidecar.core.errors import Conflict, CtxdError
from ctxd_sidecar.core.keyindex import KeyIndex
from ctxd_sidecar.core.memory import NAMESPACE as MEMORY
from ctxd_sidecar.core.memory import decode_record
from ctxd_sidecar.core.migrate_replace import replace_context
from ctxd_sidecar.core.storage import Storage

PAGE = 500


class MigrationConflict(CtxdError):
    """The destination already holds different data under a key."""


@dataclass
class MigrationReport:
    contexts: int = 0
    contexts_verified: int = 0
    memory_keys: int = 0
    memory_expired_skipped: int = 0
    keys_copied: int = 0
    keys_already_present: int = 0
    keys_overwritten: int = 0
    keys_removed: int = 0
    mismatches: list[str] = field(default_factory=list)
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_dict(self) -> dict:
        return {**self.__dict__, "ok": self.ok}


class Migration:
    def __init__(
        self,
        src: Storage,
        dst: Storage,
        *,
        overwrite: bool = False,
        idem_cap: int = 256,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ):
        self.src, self.dst = src, dst
        self.overwrite = overwrite
        self.dry_run = dry_run
        self.progress = progress
        self.src_contexts = ContextStore(src, idem_cap=idem_cap)
        self.dst_contexts = ContextStore(dst, idem_cap=idem_cap)
        self.report = MigrationReport(dry_run=dry_run)
        self._done = 0
        self._total = 0

    async def run(self) -> MigrationReport:
        if self.progress is not None:
            for namespace in (MEMORY, HEADS):
                async for _ in self._names(KeyIndex(self.src, namespace)):
                    self._total += 1
            self.progress(0, self._total)
        await self._memory()
        await self._contexts()
        return self.report

    def _step(self) -> None:
        self._done += 1
        if self.progress is not None:
            self.progress(self._done, max(self._total, self._done))

    async def _add(self, index: KeyIndex, name: str) -> None:
        if not self.dry_run:
            await index.add(name)

    # -- copying ---------------------------------------------------------------------
    async def _copy(self, key: str, value: bytes) -> None:
        if self.dry_run:
            return await self._count(key, value)
        try:
            await self.dst.put(key, value, if_absent=True)
            self.report.keys_copied += 1
            return
        except Conflict:
            pass
        current = await self.dst.get(key)
        if current is not None and current.value == value:
            self.report.keys_already_present += 1
            return
        if not self.overwrite:
            raise MigrationConflict(
                f"the destination already holds different data under {key!r}; "
                "rerun with --overwrite to replace it"
            )
        await self.dst.put(key, value)
        self.report.keys_overwritten += 1

    async def _count(self, key: str, value: bytes) -> None:
        """What :meth:`_copy` would do, without writing."""
        current = await self.dst.get(key)
        if current is None:
            self.report.keys_copied += 1
        elif current.value == value:
            self.report.keys_already_present += 1
        elif self.overwrite:
            self.report.keys_overwritten += 1
        else:
            self.report.mismatches.append(
                f"the destination already holds different data under {key!r}; "
                "a run would stop there (--overwrite replaces it)"
            )

    async def _names(self, index: KeyIndex):
        after = ""
        while True:
            page = await index.list("", start_after=after, limit=PAGE)
            for name in page:
                yield name
            if len(page) < PAGE:
                return
            after = page[-1]

    # -- memory ------------------------------------------------------------------------
    async def _memory(self) -> None:
        src_index, dst_index = KeyIndex(self.src, MEMORY), KeyIndex(self.dst, MEMORY)
        now = int(time.time() * 1000)
        copied = []
        async for name in self._names(src_index):
            item = await self.src.get(f"{MEMORY}/{name}")
            record = decode_record(item.value) if item is not None else None
            self._step()
            if record is None:
                continue
            if record.expired(now):
                self.report.memory_expired_skipped += 1
                continue
            await self._add(dst_index, name)
            await self._copy(f"{MEMORY}/{name}", item.value)
            copied.append(name)
        self.report.memory_keys = len(copied)
        search = await self.src.get(f"{MEMORY}/_search")  # the vectors' dimension and metric
        if search is not None:
            await self._copy(f"{MEMORY}/_search", search.value)
        if self.dry_run:
            return
        present = 0
        async for _ in self._names(dst_index):
            present += 1
        if present < len(copied):
            self.report.mismatches.append(
                f"memory: {len(copied)} keys copied but the destination lists {present}"
            )

    # -- contexts ------------------------------------------------------------------------
    async def _contexts(self) -> None:
        dst_index = KeyIndex(self.dst, HEADS)
        async for cid in self._names(KeyIndex(self.src, HEADS)):
            head_item = await self.src.get(head_key(cid))
            state = await self.src_contexts.restore(cid)
            self._step()
            if head_item is None or state is None:
                continue
            self.report.contexts += 1
            keys = await self.src_contexts.keys_of(cid, state.gen, state.version, state.segments)
            keys += await lineage.lineage_keys(self.src, state)
            if self.overwrite and not self.dry_run:
                await self._add(dst_index, cid)
                await replace_context(self, cid, head_item, state, keys)
                await self._verify(cid, state)
                continue
            for key in keys:
                item = await self.src.get(key)
                if item is not None:
                    await self._copy(key, item.value)
            await self._add(dst_index, cid)
            await self._copy(head_key(cid), head_item.value)
            if self.dry_run:
                continue
            await self._verify(cid, state)

    async def _verify(self, cid: str, state) -> None:
        """The destination restores the context as the source has it."""
        try:
            copy = await self.dst_contexts.restore(cid)
        except CtxdError as exc:
            self.report.mismatches.append(f"context {cid}: destination unreadable ({exc.message})")
            return
        if (
            copy is None
            or copy.version != state.version
            or len(copy.messages) != len(state.messages)
        ):
            got = "missing" if copy is None else f"v{copy.version}/{len(copy.messages)} msgs"
            self.report.mismatches.append(
                f"context {cid}: source v{state.version}/{len(state.messages)} msgs, "
                f"destination {got}"
            )
        else:
            self.report.contexts_verified += 1
