"""Context operations: the domain behind ``ctxd.v1.ContextService``.

:class:`ContextService` owns the registry, the durable layout and the rules
(versions, idempotency, validation, expiry). It knows nothing of gRPC.

Other parts change a context through :meth:`ContextService.change`, which
runs a builder under the context's lock and commits the log record it
returns (register the record's handler with
:func:`sidecar.core.contexts.ops.op`), and follow changes through
:meth:`ContextService.add_listener`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import random
import secrets
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from sidecar.core.contexts import validate
from sidecar.core.contexts.janitor import Janitor, Job
from sidecar.core.contexts.model import (
    CONVERSATION,
    ROOT,
    ROOT_ID,
    ContextInfo,
    ContextState,
    Msg,
    SegmentRef,
    message_id,
)
from sidecar.core.contexts.ops import DamagedRecord, apply_record
from sidecar.core.contexts.persistence import (
    HEADS,
    TRASH,
    Cleanup,
    ContextStore,
    Damaged,
    HeadMoved,
    NeedsFullRestore,
    decode,
    encode,
    head_key,
    not_found,
    trash_name,
)
from sidecar.core.contexts.registry import Entry, Registry
from sidecar.core.contexts.tokens import window_for_model
from sidecar.core.errors import (
    Conflict,
    CtxdError,
    FailedPrecondition,
    InvalidArgument,
    Unavailable,
)
from sidecar.core.keyindex import KeyIndex, crash_point
from sidecar.core.storage import Storage
from sidecar.store import Item

log = logging.getLogger(__name__)

#: Commit attempts when another writer keeps taking the next version.
COMMIT_ATTEMPTS = 8
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
#: Largest model window accepted (tokens).
MAX_MODEL_WINDOW = 100_000_000
#: Contexts examined per page by the idle-expiry sweep.
SWEEP_PAGE = 200


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class TurnRequest:
    context_id: str
    messages: Sequence[Msg]
    expected_version: int | None = None
    idempotency_key: str = ""
    principal: str = ""
    model_window: int = 0
    model: str = ""
    task: str = ""


@dataclass(frozen=True, slots=True)
class TurnResult:
    version: int
    est_tokens: int
    compaction_due: bool
    message_ids: list[str]
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class ContextEvent:
    """Something happened to a context (``kind``: turn, deleted, archived, or
    the event name a :meth:`ContextService.change` caller gives)."""

    context_id: str
    kind: str
    version: int
    ts: int
    detail: dict[str, Any] = field(default_factory=dict)


Listener = Callable[[ContextEvent, ContextState | None], None]


class ContextService:
    def __init__(
        self,
        config,
        storage: Storage,
        *,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.config = config
        self.storage = storage
        #: Wall-clock milliseconds; replaceable (tests move time forward).
        self.clock = clock
        self.store = ContextStore(storage, idem_cap=config.idempotency_keys)
        self.index = KeyIndex(storage, HEADS)
        self.trash = KeyIndex(storage, TRASH)
        self.registry = Registry(config.cache_max_contexts, config.cache_max_bytes, self._on_evict)
        self.janitor = Janitor(batch=8 if self.store.remote else 1)
        self._flushing: dict[str, asyncio.Task] = {}
        self._tasks: set[asyncio.Task] = set()
        self._listeners: list[Listener] = []
        self._expiry: asyncio.Task | None = None
        self._root_ready = False

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self._ensure_root()
        except CtxdError as exc:
            log.warning("root context not ready yet", extra={"error": str(exc)})
        # Before serving: a deletion a crash cut short must not show the
        # context again (its head may still be there).
        await self._resume_deletions()
        ttl, every = self.config.conversation_ttl, self.config.expire_interval
        if ttl > 0 and every > 0:
            self._expiry = asyncio.create_task(self._expire_loop(every), name="contexts-expiry")

    async def stop(self, timeout: float = 10.0) -> None:
        """Checkpoint what is resident (so a restart restores quickly) and
        finish background work, within ``timeout`` seconds."""
        if self._expiry is not None:
            self._expiry.cancel()
        for e in self.registry.entries():
            st = e.state
            if st is not None and (st.version > st.head_version or st.dirty):
                self._schedule_checkpoint(e)
        deadline = asyncio.get_running_loop().time() + timeout
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            _, late = await asyncio.wait(pending, timeout=timeout)
            for t in late:
                t.cancel()
        await self.janitor.stop(max(0.1, deadline - asyncio.get_running_loop().time()))

    def now(self) -> int:
        return int(self.clock())

    def _spawn(self, coro: Coroutine) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- events ------------------------------------------------------------------------------------
    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(event, state)`` after every committed change (state is
        None for deletions). Listeners run on the event loop and must not block."""
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn) if fn in self._listeners else None

    def _emit(self, event: ContextEvent, state: ContextState | None) -> None:
        for fn in list(self._listeners):
            try:
                fn(event, state)
            except Exception:  # noqa: BLE001 - a listener's bug must not fail the call
                log.exception("context listener failed", extra={"context": event.context_id})

    # -- loading -----------------------------------------------------------------------------------
    def _new_state(self, cid: str) -> ContextState:
        now = self.now()
        return ContextState(
            id=cid,
            kind=ROOT if cid == ROOT_ID else CONVERSATION,
            gen=secrets.token_hex(4),
            created=now,
            updated=now,
            model_window=self.config.default_model_window,
            idem_cap=self.config.idempotency_keys,
        )

    async def _load(self, e: Entry) -> ContextState | None:
        """The entry's state, restored if needed. Call with ``e.lock`` held."""
        if e.state is not None and not e.stale:
            return e.state
        flushing = self._flushing.get(e.id)
        if flushing is not None:
            await asyncio.wait([flushing])
        async with e.ckpt_lock:
            st = await self.store.restore(e.id)
        if st is None and e.id == ROOT_ID:
            st = self._new_state(ROOT_ID)
        elif st is not None:
            self._sweep(self.store.cleanup_for(st))
        e.state, e.stale = st, False
        return st

    async def _read(self, cid: str) -> ContextState | None:
        async with self.registry.use(cid) as e:
            if e.state is None or e.stale:
                async with e.lock:
                    await self._load(e)
            return e.state

    async def _create(self, st: ContextState) -> None:
        """Make a new context durable (head at version 0, listed)."""
        await self.index.add(st.id)
        await self.store.create_head(st)

    async def _ensure_root(self) -> None:
        if self._root_ready:
            return
        async with self.registry.use(ROOT_ID) as e, e.lock:
            st = await self._load(e)
            if st.head_etag is None:
                try:
                    await self._create(st)
                except Conflict:
                    e.stale = True
        self._root_ready = True

    # -- committing --------------------------------------------------------------------------------
    async def _commit(self, e: Entry, st: ContextState, rec: dict[str, Any], built=None) -> None:
        """Write the record (the serialisation point), then apply it."""
        with self.janitor.foreground():
            await self.store.write_log(st, rec)
        if built is not None:
            rec["_built"] = built
        try:
            apply_record(st, rec)
        except Exception:
            e.stale = True  # durable but not applied: restore before the next use
            raise
        finally:
            rec.pop("_built", None)

    async def _refresh(self, e: Entry, *, lost_race: bool = False) -> None:
        """Catch up from the log (another writer shares the store). After a
        lost race the next record must exist; if it does not, the context was
        replaced meanwhile: restore it whole."""
        st = e.state
        try:
            tail = await self.store.read_tail(st.id, st.gen, st.version)
            for rec in tail:
                apply_record(st, rec)
            if lost_race and not tail:
                e.stale = True
        except (HeadMoved, DamagedRecord):
            e.stale = True

    def _after_commit(self, e: Entry, st: ContextState, kind: str, detail: dict[str, Any]) -> None:
        cfg = self.config
        if (
            st.version - st.head_version >= cfg.checkpoint_every
            or st.unsealed_bytes >= cfg.checkpoint_bytes
        ):
            self._schedule_checkpoint(e)
        self._emit(ContextEvent(st.id, kind, st.version, st.updated, detail), st)

    # -- checkpoints -------------------------------------------------------------------------------
    def _schedule_checkpoint(self, e: Entry) -> None:
        if e.ckpt_task is not None and not e.ckpt_task.done():
            e.ckpt_again = True
            return
        e.ckpt_task = self._spawn(self._run_checkpoints(e))

    async def _run_checkpoints(self, e: Entry) -> None:
        while True:
            e.ckpt_again = False
            await self._checkpoint(e)
            if not e.ckpt_again:
                return

    async def _checkpoint(self, e: Entry) -> bool:
        st = e.state
        if st is None or not st.loaded or st.head_etag is None:
            return False
        async with e.ckpt_lock:
            if e.state is not st:
                return False
            written = st.head_etag
            try:
                self._sweep(await self.store.checkpoint(st))
                return st.head_etag != written
            except Conflict:
                log.warning("context head replaced by another writer", extra={"context": st.id})
                e.stale = True
            except CtxdError as exc:
                log.warning("checkpoint failed", extra={"context": st.id, "error": str(exc)})
        return False

    def _sweep(self, cleanup: Cleanup | None) -> None:
        """Seal the log records and delete the segments a written head allows."""
        if cleanup is None:
            return
        cid, gen = cleanup.state.id, cleanup.state.gen

        async def prepare():
            writes = [
                lambda v=v: self.store.seal_log(cid, gen, v)
                for v in range(cleanup.first, cleanup.last + 1)
            ]
            return writes + [
                lambda s=s: self.store.delete_segment(cid, gen, s) for s in cleanup.segments
            ]

        self.janitor.submit(Job(f"sweep {cid}", prepare, cleanup.done))

    def _on_evict(self, e: Entry) -> None:
        st = e.state
        if st is None or st.head_etag is None or not (st.version > st.head_version or st.dirty):
            return
        self._flushing[e.id] = self._spawn(self._flush_evicted(e))

    async def _flush_evicted(self, e: Entry) -> None:
        me = asyncio.current_task()
        try:
            if e.ckpt_task is not None and e.ckpt_task is not me:
                await asyncio.wait([e.ckpt_task])
            await self._checkpoint(e)
        finally:
            if self._flushing.get(e.id) is me:
                del self._flushing[e.id]

    async def checkpoint_now(self, cid: str) -> bool:
        """Checkpoint a resident context at once (admin tools, tests)."""
        e = self.registry.peek(cid)
        if e is None:
            return False
        return await self._checkpoint(e)

    # -- AppendTurn --------------------------------------------------------------------------------
    def _check_turn_request(self, req: TurnRequest) -> str:
        cid = validate.context_id(req.context_id)
        validate.bounded(req.idempotency_key, "idempotency_key", validate.MAX_IDEMPOTENCY_KEY)
        validate.bounded(req.principal, "principal", validate.MAX_PRINCIPAL)
        validate.bounded(req.task, "task", validate.MAX_TASK)
        validate.bounded(req.model, "model", validate.MAX_MODEL_NAME)
        if req.expected_version is not None and req.expected_version < 0:
            raise InvalidArgument("expected_version", "must not be negative")
        if not 0 <= req.model_window <= MAX_MODEL_WINDOW:
            raise InvalidArgument(
                "model_window", f"must be between 0 (keep) and {MAX_MODEL_WINDOW} tokens"
            )
        validate.turn(
            req.messages,
            max_messages=self.config.max_turn_messages,
            max_message_bytes=self.config.max_message_bytes,
        )
        return cid

    async def append_turn(self, req: TurnRequest) -> TurnResult:
        """Append one turn atomically; durable before it returns."""
        cid = self._check_turn_request(req)
        key = req.idempotency_key
        async with self.registry.use(cid) as e, e.lock:
            caught_up = False
            for attempt in range(COMMIT_ATTEMPTS):
                st = await self._load(e)
                if st is None:
                    st = e.state = self._new_state(cid)
                if key and key in st.idem:
                    return _result(st.idem[key], replayed=True)
                if req.expected_version is not None and req.expected_version != st.version:
                    if req.expected_version > st.version and not caught_up and st.head_etag:
                        # The caller saw a newer version (written by another
                        # sidecar sharing the store): catch up, then decide.
                        caught_up = True
                        await self._refresh(e)
                        continue
                    raise _stale_version(cid, st.version, req.expected_version)
                validate.tool_results_answer_calls(req.messages, st.call_ids)
                if st.head_etag is None:
                    try:
                        await self._create(st)
                    except Conflict:
                        e.stale = True  # created elsewhere meanwhile
                        continue
                rec, built, result = self._append_record(st, req)
                try:
                    await self._commit(e, st, rec, built)
                except Conflict:
                    await self._refresh(e, lost_race=True)
                    await _race_backoff(attempt)
                    continue
                self._after_commit(
                    e,
                    st,
                    "turn",
                    {"messages": len(built), "compaction_due": result["compaction_due"]},
                )
                return _result(result)
        raise Unavailable(f"context {cid} is being written elsewhere; retry")

    def _append_record(
        self, st: ContextState, req: TurnRequest
    ) -> tuple[dict[str, Any], list[Msg], dict[str, Any]]:
        now = self.now()
        version = st.version + 1
        seq = st.next_seq
        built = [m.assigned(seq + i, m.ts or now) for i, m in enumerate(req.messages)]
        meta: dict[str, Any] = {}
        if req.principal:
            meta["principal"] = req.principal
        if req.task:
            meta["task"] = req.task
        if req.model:
            meta["model"] = req.model
        if req.model_window:
            meta["model_window"] = req.model_window
        elif req.model and req.model != st.model:
            meta["model_window"] = window_for_model(req.model, self.config.default_model_window)
        window = meta.get("model_window", st.model_window)
        est = st.calibration.apply(st.raw_tokens + sum(m.tokens for m in built))
        result = {
            "version": version,
            "est_tokens": est,
            "compaction_due": est > self.config.compact_at * window,
            "message_ids": [m.id for m in built],
        }
        rec: dict[str, Any] = {
            "v": version,
            "op": "append",
            "ts": now,
            "msgs": [m.to_dict() for m in built],
        }
        if meta:
            rec["meta"] = meta
        if req.idempotency_key:
            rec["idem"] = req.idempotency_key
            rec["res"] = result
        if st.calibration.samples:
            rec["cal"] = st.calibration.to_dict()
        return rec, built, result

    # -- generic change (other ops) ----------------------------------------------------------------
    async def change(
        self,
        context_id: str,
        build: Callable[[ContextState], dict[str, Any] | None],
        *,
        expected_version: int | None = None,
        event: str = "change",
    ) -> tuple[ContextState, dict[str, Any] | None]:
        """Commit the record ``build(state)`` returns (``{"op": ..., ...}``;
        ``v`` and ``ts`` are filled in), or nothing when it returns None.

        ``build`` runs under the context's lock with the current state and
        may raise domain errors (nothing is written then). The context must
        exist (root always does). Returns the state after the change and the
        committed record.
        """
        cid = validate.context_id(context_id)
        if expected_version is not None and expected_version < 0:
            raise InvalidArgument("expected_version", "must not be negative")
        async with self.registry.use(cid) as e, e.lock:
            caught_up = False
            for attempt in range(COMMIT_ATTEMPTS):
                st = await self._load(e)
                if st is None or not st.exists:
                    raise not_found(cid)
                if expected_version is not None and expected_version != st.version:
                    if expected_version > st.version and not caught_up:
                        caught_up = True
                        await self._refresh(e)
                        continue
                    raise _stale_version(cid, st.version, expected_version)
                body = build(st)
                if body is None:
                    return st, None
                if st.head_etag is None:
                    try:
                        await self._create(st)
                    except Conflict:
                        e.stale = True
                        continue
                rec = {**body, "v": st.version + 1, "ts": self.now()}
                if st.calibration.samples and "cal" not in rec:
                    rec["cal"] = st.calibration.to_dict()
                try:
                    await self._commit(e, st, rec)
                except Conflict:
                    await self._refresh(e, lost_race=True)
                    await _race_backoff(attempt)
                    continue
                self._after_commit(e, st, event, {"op": rec["op"]})
                return st, rec
        raise Unavailable(f"context {cid} is being written elsewhere; retry")

    # -- reads -------------------------------------------------------------------------------------
    async def get(self, context_id: str) -> ContextState:
        """The context's record. Treat it as read-only and read it without
        awaiting in between (it is the live object)."""
        cid = validate.context_id(context_id)
        st = await self._read(cid)
        if st is None or not st.exists:
            raise not_found(cid)
        return st

    async def info(self, context_id: str) -> ContextInfo:
        return (await self.get(context_id)).info()

    async def list_contexts(
        self,
        page_size: int = 0,
        page_token: str = "",
        kind: str = "",
        include_archived: bool = False,
    ) -> tuple[list[ContextInfo], str]:
        """One page of contexts in id order, and the token of the next ("" at the end)."""
        if page_size < 0:
            raise InvalidArgument("page_size", "must not be negative")
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        after = _decode_token(page_token)
        if kind == ROOT:
            if after:
                return [], ""
            return [await self.info(ROOT_ID)], ""
        if not self._root_ready:
            await self._ensure_root()
        out: list[ContextInfo] = []
        exhausted = False
        while len(out) < size:
            want = size - len(out)
            batch = await self.index.scan("", start_after=after, limit=want)
            infos = await asyncio.gather(*(self._listed(name, item) for name, item in batch))
            for (name, _), info in zip(batch, infos, strict=True):
                after = name
                if info is None or (info.archived and not include_archived):
                    continue
                if kind == CONVERSATION and info.kind != CONVERSATION:
                    continue
                out.append(info)
            if len(batch) < want:
                exhausted = True
                break
        return out, "" if exhausted else _encode_token(after)

    async def _listed(self, cid: str, item: Item) -> ContextInfo | None:
        """Info of a listed context: from memory if resident, else from its
        head and log tail (no segments)."""
        e = self.registry.peek(cid)
        if e is not None and e.state is not None and not e.stale:
            return e.state.info() if e.state.exists else None
        try:
            head = self.store.parse_head(cid, item)
            try:
                st = await self.store.restore(cid, loaded=False, head=(head, item.version))
            except NeedsFullRestore:
                st = await self._read(cid)
        except Damaged as exc:
            log.error("context skipped in listing", extra={"context": cid, "error": str(exc)})
            return None
        return st.info() if st is not None and st.exists else None

    # -- RecordUsage -------------------------------------------------------------------------------
    async def record_usage(
        self, context_id: str, input_tokens: int, output_tokens: int = 0, model: str = ""
    ) -> tuple[int, float]:
        """Calibrate the context's estimate from a provider's reported input
        tokens. Not a versioned change: the factor rides along with the next
        record and checkpoint."""
        cid = validate.context_id(context_id)
        if input_tokens <= 0:
            raise InvalidArgument(
                "input_tokens", "must be positive (the provider's reported prompt tokens)"
            )
        if output_tokens < 0:
            raise InvalidArgument("output_tokens", "must not be negative")
        validate.bounded(model, "model", validate.MAX_MODEL_NAME)
        async with self.registry.use(cid) as e, e.lock:
            st = await self._load(e)
            if st is None or not st.exists:
                raise not_found(cid)
            if st.calibration.observe(input_tokens, st.raw_tokens, model or st.model):
                st.dirty = True
            ratio = st.calibration.ratio if st.calibration.samples else 1.0
            return st.est_tokens, ratio

    # -- DeleteContext -----------------------------------------------------------------------------
    async def delete(self, context_id: str, expected_version: int | None = None) -> bool:
        """Delete a conversation and everything stored for it; False if it did not exist."""
        cid = validate.context_id(context_id)
        if cid == ROOT_ID:
            raise FailedPrecondition("the root context cannot be deleted")
        if expected_version is not None and expected_version < 0:
            raise InvalidArgument("expected_version", "must not be negative")
        async with self.registry.use(cid) as e, e.lock:
            st = await self._load(e)
            if st is None or not st.exists:
                # Unknown (perhaps only seen by a refused first turn): the
                # same answer whatever the expected_version.
                return False
            if expected_version is not None and expected_version != st.version:
                raise _stale_version(cid, st.version, expected_version)
            existed = st.exists
            if st.head_etag is None:  # never made durable here: nothing stored
                e.state = None
                self.registry.drop(e)
                return False
            await self._delete_locked(e, st)
        self._emit(ContextEvent(cid, "deleted", st.version, self.now()), None)
        return existed

    async def _delete_locked(self, e: Entry, st: ContextState) -> None:
        async with e.ckpt_lock:
            name = trash_name(st.id, st.gen)
            plan = {
                "id": st.id,
                "gen": st.gen,
                "last": st.version,
                "segments": [s.to_list() for s in st.segments + st.dropped],
            }
            await self.trash.add(name)
            await self.storage.put(f"{TRASH}/{name}", encode(plan))
            crash_point("contexts.after_trash_record")
            try:
                await self.storage.delete(head_key(st.id), if_version=st.head_etag)
            except Conflict:
                e.stale = True
                # Not deleted after all: the trash record must not finish it later.
                await self.storage.delete(f"{TRASH}/{name}")
                await self.trash.remove(name)
                raise Conflict(f"context {st.id} changed elsewhere; re-read and retry") from None
            await self.index.remove(st.id)
            e.state = None
            self.registry.drop(e)
        crash_point("contexts.after_head_delete")
        self._purge(name, plan)

    def _purge(self, name: str, plan: dict[str, Any]) -> None:
        """Remove a deleted incarnation's keys in the background, then its trash record."""

        async def prepare():
            keys = await self.store.keys_of(
                plan["id"],
                plan["gen"],
                int(plan["last"]),
                [SegmentRef.from_list(s) for s in plan.get("segments", ())],
            )
            return [lambda k=k: self.storage.delete(k) for k in keys]

        async def done():
            await self.storage.delete(f"{TRASH}/{name}")
            await self.trash.remove(name)

        self.janitor.submit(Job(f"purge {plan['id']}", prepare, done))

    async def _resume_deletions(self) -> None:
        """Finish deletions a crash interrupted (their trash records remain)."""
        try:
            for name, item in await self.trash.scan(""):
                plan = decode(item.value, f"trash record {name}")
                head = await self.store.read_head(plan["id"])
                if head is not None and head[0].get("gen") == plan["gen"]:
                    await self.storage.delete(head_key(plan["id"]))
                    await self.index.remove(plan["id"])
                self._purge(name, plan)
        except CtxdError as exc:
            log.warning("could not resume context deletions", extra={"error": str(exc)})

    # -- idle expiry -------------------------------------------------------------------------------
    async def _expire_loop(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self.expire_idle()
            except CtxdError as exc:
                log.warning("idle-conversation sweep failed", extra={"error": str(exc)})
            except Exception:  # noqa: BLE001 - keep sweeping
                log.exception("idle-conversation sweep failed")

    async def expire_idle(self) -> int:
        """Close conversations idle longer than ``conversation_ttl`` (delete or
        archive per ``on_expire``); return how many were closed. Root never."""
        ttl_ms = int(self.config.conversation_ttl * 1000)
        if ttl_ms <= 0:
            return 0
        closed = 0
        after = ""
        while True:
            batch = await self.index.scan("", start_after=after, limit=SWEEP_PAGE)
            for name, item in batch:
                after = name
                if name == ROOT_ID:
                    continue
                info = await self._listed(name, item)
                if info is None or info.archived or self.now() - info.updated <= ttl_ms:
                    continue
                if await self._close_idle(name, ttl_ms):
                    closed += 1
            if len(batch) < SWEEP_PAGE:
                return closed

    async def _close_idle(self, cid: str, ttl_ms: int) -> bool:
        async with self.registry.use(cid) as e, e.lock:
            st = await self._load(e)
            if st is None or not st.exists or st.kind == ROOT or st.archived:
                return False
            if self.now() - st.updated <= ttl_ms:
                return False  # a turn arrived meanwhile
            if self.config.on_expire == "delete":
                await self._delete_locked(e, st)
                kind = "deleted"
            else:
                st.archived = True
                st.dirty = True
                async with e.ckpt_lock:
                    self._sweep(await self.store.checkpoint(st))
                e.state = None
                self.registry.drop(e)
                kind = "archived"
        log.info("idle conversation closed", extra={"context": cid, "action": kind})
        self._emit(ContextEvent(cid, kind, st.version, self.now()), None)
        return True


async def _race_backoff(attempt: int) -> None:
    """After losing a write race to another sidecar, wait a random moment
    (growing with each loss) so racing writers stop colliding in lockstep."""
    await asyncio.sleep(random.uniform(0, min(0.1, 0.005 * 2**attempt)))


def _result(res: dict[str, Any], replayed: bool = False) -> TurnResult:
    return TurnResult(
        int(res["version"]),
        int(res["est_tokens"]),
        bool(res["compaction_due"]),
        list(res["message_ids"]),
        replayed,
    )


def _stale_version(cid: str, actual: int, expected: int) -> Conflict:
    return Conflict(
        f"context {cid} is at version {actual}, not the expected {expected}; re-read and retry"
    )


def _encode_token(after: str) -> str:
    return base64.urlsafe_b64encode(f"after:{after}".encode()).decode().rstrip("=")


def _decode_token(token: str) -> str:
    if not token:
        return ""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    if not raw.startswith("after:") or not validate.CONTEXT_ID_RE.fullmatch(raw[6:]):
        raise InvalidArgument(
            "page_token", "is not a token this service returned; omit it to start over"
        )
    return raw[6:]


__all__ = [
    "ContextEvent",
    "ContextService",
    "TurnRequest",
    "TurnResult",
    "message_id",
]
