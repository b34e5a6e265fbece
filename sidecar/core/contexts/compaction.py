"""Compaction of a context: plan, apply, compact, the automatic trigger and
the event feed behind ``WatchContext``.

:class:`Compactor` works over a :class:`ContextService`; the rules (where to
cut, how answers are read and merged, which skills are evicted) live in
:mod:`sidecar.core.compaction`.

**Plans are stateless.** ``PlanCompaction`` hands out a ``plan_ref`` that
encodes the context incarnation, the base version, the folded prefix (first
and last message seq, count) and a hash of the folded message ids. Apply
folds exactly that prefix if it is still the live prefix of the transcript
(ABORTED otherwise: another compaction or a deletion came in between);
turns appended after the plan stay, so any number of sidecars can apply a
plan another one made.

**The ``compact`` log record** is the commit and the checkpoint of a
compaction (the head and segments catch up on the usual schedule, see
:mod:`sidecar.core.contexts`). It carries everything its replay needs, decided
before the write: the seq folded through, the merged summary as stored, the
skills whose bodies are evicted, and (for the event feed) the folded count
and the token estimates before and after. Evicted skills leave the
context's loaded set, so their bodies leave the prompt; their names stay in
the skills catalogue (and ``evicted_skills`` of the reply tells the
runtime), and a later ``@skill:`` reference loads them again.

**The automatic trigger** runs after a turn whose reply said
``compaction_due`` (``est_tokens > compact_at × model_window``), when
``contexts.auto_compact`` is on. It runs in a background task (the turn's
reply is not delayed), at most one per context at a time, with the default
summariser. Failures are logged, counted, published as
``compaction_failed`` events and back off per context
(:class:`~sidecar.core.compaction.Backoff`); after
``compaction.backoff_stop_after`` consecutive failures automatic attempts
stop until a manual compaction succeeds or ``backoff_resume_after`` passes.
A turn starts at most one attempt, so the trigger can never loop.

**Watchers** get a bounded queue each (:data:`WATCH_QUEUE`): a watcher that
falls behind loses its oldest events, and the next event it reads says how
many it missed, so a slow reader never grows memory.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sidecar import metrics
from sidecar.core.compaction import (
    ANSWER_SCHEMA_JSON,
    Backoff,
    BackoffPolicy,
    Cut,
    MalformedAnswer,
    Summary,
    build_excerpt,
    build_system_prompt,
    merge,
    parse_answer,
    plan_cut,
    skills_to_evict,
    summarise,
)
from sidecar.core.contexts import ops
from sidecar.core.contexts.model import ContextState, Msg
from sidecar.core.contexts.service import ContextEvent, ContextService
from sidecar.core.contexts.tokens import MESSAGE_OVERHEAD, estimate_text
from sidecar.core.errors import Conflict, CtxdError, InvalidArgument, NotFound

log = logging.getLogger(__name__)

OP = "compact"
#: Longest answer ApplyCompaction accepts (characters).
MAX_ANSWER_CHARS = 1024 * 1024
#: Longest ``instructions`` Compact accepts (characters).
MAX_INSTRUCTIONS_CHARS = 8 * 1024
#: Events one watcher may have waiting before the oldest are dropped.
WATCH_QUEUE = 256
#: The automatic trigger folds until the kept tail is at most this share of
#: the threshold (``compact_at × model_window``), so one run buys room for
#: several turns instead of firing again at the next one.
AUTO_TARGET_SHARE = 0.5
_REF_PREFIX = "cp1."
#: Seconds stop() waits for automatic compactions before cancelling them.
STOP_GRACE = 2.0


# -- the log record -----------------------------------------------------------------------
@ops.op(OP)
def _apply_compact(state: ContextState, rec: dict[str, Any]) -> None:
    """``through``: last folded seq; ``summary``: the merged summary as stored;
    ``evict``: skill names whose bodies leave the context."""
    state.fold_messages(int(rec["through"]))
    state.summary = Summary.from_dict(rec["summary"])
    evict = set(rec.get("evict") or ())
    if evict:
        state.skills = [s for s in state.skills if s.name not in evict]
    state.refresh_blocks()


# -- results ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanResult:
    nothing_to_do: bool
    reason: str = ""
    plan_ref: str = ""
    base_version: int = 0
    fold_count: int = 0
    fold_through_id: str = ""
    system_prompt: str = ""
    excerpt: str = ""
    answer_schema_json: str = ""
    tokens_before: int = 0


@dataclass(frozen=True)
class ApplyResult:
    version: int
    folded: int
    tokens_before: int
    tokens_after: int
    summary: Summary
    evicted_skills: list[str]


@dataclass(frozen=True)
class CompactResult:
    compacted: bool
    reason: str = ""
    summariser: str = ""
    applied: ApplyResult | None = None


@dataclass(frozen=True)
class WatchEvent:
    """One event for watchers (``kind``: turn, compaction, compaction_failed,
    plan, skills, preflight, deleted)."""

    context_id: str
    kind: str
    version: int
    ts: int
    tokens_before: int = 0
    tokens_after: int = 0
    folded: int = 0
    detail: str = ""


@dataclass(frozen=True)
class _Ref:
    gen: str
    base: int
    first: int
    through: int
    count: int
    digest: str

    def encode(self) -> str:
        raw = json.dumps(
            [self.gen, self.base, self.first, self.through, self.count, self.digest],
            separators=(",", ":"),
        ).encode()
        return _REF_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> _Ref:
        bad = InvalidArgument(
            "plan_ref", "is not a plan_ref PlanCompaction returned; plan the compaction again"
        )
        if not text.startswith(_REF_PREFIX) or len(text) > 512:
            raise bad
        body = text[len(_REF_PREFIX) :]
        try:
            gen, base, first, through, count, digest = json.loads(
                base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            )
            ref = cls(str(gen), int(base), int(first), int(through), int(count), str(digest))
        except (binascii.Error, ValueError, TypeError):
            raise bad from None
        if ref.count < 1 or ref.first < 1 or ref.through < ref.first:
            raise bad
        return ref


def _digest(folded: list[Msg]) -> str:
    h = hashlib.sha256()
    for m in folded:
        h.update(m.id.encode())
        h.update(b"\n")
    return h.hexdigest()[:32]


def _block_tokens(summary: Summary, st: ContextState) -> int:
    """What ``refresh_blocks`` will count with ``summary`` in place."""
    n = 0
    for text in (summary.render(), st.plan.render() if st.plan else ""):
        if text:
            n += estimate_text(text) + MESSAGE_OVERHEAD
    return n


# -- watchers ------------------------------------------------------------------------------------
class Subscription:
    """A watcher's bounded queue; iterate it for events. Ends after a
    ``deleted`` event or :meth:`close`."""

    def __init__(self, context_id: str, maxlen: int) -> None:
        self.context_id = context_id
        self._queue: deque[WatchEvent] = deque(maxlen=maxlen)
        self._ready = asyncio.Event()
        self._closed = False
        self.dropped = 0

    def push(self, ev: WatchEvent) -> None:
        if self._closed:
            return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
        self._queue.append(ev)
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[WatchEvent]:
        while True:
            while not self._queue:
                if self._closed:
                    return
                self._ready.clear()
                await self._ready.wait()
            ev = self._queue.popleft()
            if self.dropped:
                note = f"{self.dropped} earlier events dropped (watcher too slow)"
                ev = WatchEvent(**{**ev.__dict__, "detail": f"{ev.detail}; {note}".lstrip("; ")})
                self.dropped = 0
            yield ev
            if ev.kind == "deleted":
                return


# -- the orchestrator ------------------------------------------------------------------------
@dataclass
class _Auto:
    backoff: Backoff
    task: asyncio.Task | None = None


class Compactor:
    """Plan, apply and run compactions of contexts held by ``service``.

    ``config`` is the whole configuration (``contexts`` and ``compaction``
    sections); ``summarisers`` maps names to summariser plugins.
    """

    def __init__(
        self, service: ContextService, config, summarisers: dict[str, Any], *, clock=time.monotonic
    ) -> None:
        self.service = service
        self.contexts_cfg = config.contexts
        self.cfg = config.compaction
        self.summarisers = summarisers
        self._policy = BackoffPolicy.from_config(self.cfg)
        self._clock = clock
        self._auto: dict[str, _Auto] = {}
        self._subs: dict[str, set[Subscription]] = {}
        #: Detail of the compaction being committed, for its event.
        self._pending: dict[str, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._unlisten = None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        if self._unlisten is None:
            self._unlisten = self.service.add_listener(self._on_event)

    async def stop(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        for subs in self._subs.values():
            for sub in subs:
                sub.close()
        self._subs.clear()
        # Let automatic runs finish; one still waiting on a slow summariser
        # after STOP_GRACE is cancelled (nothing is written before its answer).
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=STOP_GRACE)
            for t in late:
                t.cancel()
            if late:
                await asyncio.wait(late, timeout=STOP_GRACE)
        for s in self.summarisers.values():
            close = getattr(s, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- plan --------------------------------------------------------------------------------------
    def _options(self, keep_last: int, target_tokens: int) -> tuple[int, int | None]:
        if keep_last < 0:
            raise InvalidArgument("keep_last", "must not be negative (0 uses the default)")
        if target_tokens < 0:
            raise InvalidArgument("target_tokens", "must not be negative (0 means no target)")
        return keep_last or self.contexts_cfg.keep_last, target_tokens or None

    def _cut(self, st: ContextState, keep_last: int, target: int | None) -> tuple[Cut | None, str]:
        decided = plan_cut(st.messages, keep_last, target)
        if isinstance(decided, Cut):
            return decided, ""
        return None, decided.reason

    async def plan(self, context_id: str, keep_last: int = 0, target_tokens: int = 0) -> PlanResult:
        keep, target = self._options(keep_last, target_tokens)
        st = await self.service.get(context_id)
        # Read without awaiting: the record is the live object.
        cut, reason = self._cut(st, keep, target)
        if cut is None:
            return PlanResult(
                True, reason=reason, base_version=st.version, tokens_before=st.est_tokens
            )
        folded = st.messages[: cut.fold]
        ref = _Ref(st.gen, st.version, folded[0].seq, folded[-1].seq, len(folded), _digest(folded))
        previous = st.summary if not st.summary.is_empty() else None
        return PlanResult(
            False,
            plan_ref=ref.encode(),
            base_version=st.version,
            fold_count=len(folded),
            fold_through_id=cut.fold_through_id,
            system_prompt=build_system_prompt(),
            excerpt=build_excerpt(folded, previous, clip_chars=self.cfg.clip_chars),
            answer_schema_json=ANSWER_SCHEMA_JSON,
            tokens_before=st.est_tokens,
        )

    # -- apply -------------------------------------------------------------------------------------
    async def apply(self, context_id: str, plan_ref: str, answer: str) -> ApplyResult:
        """Fold the planned prefix into the summary with the runtime's answer."""
        ref = _Ref.decode(plan_ref)
        if not answer.strip():
            raise InvalidArgument("answer", "is empty; send the model's JSON answer or plain text")
        if len(answer) > MAX_ANSWER_CHARS:
            raise InvalidArgument("answer", f"is longer than {MAX_ANSWER_CHARS} characters")
        try:
            summary = parse_answer(answer)
        except MalformedAnswer as exc:
            raise InvalidArgument("answer", exc.message) from None
        try:
            result = await self._commit(context_id, ref, summary)
        except CtxdError:
            metrics.COMPACTIONS.labels("runtime", "failed").inc()
            raise
        metrics.COMPACTIONS.labels("runtime", "ok").inc()
        self._succeeded(context_id)
        return result

    async def _commit(self, context_id: str, ref: _Ref, addition: Summary) -> ApplyResult:
        out: dict[str, Any] = {}

        def build(st: ContextState) -> dict[str, Any]:
            msgs = st.messages
            n = ref.count
            if (
                st.gen != ref.gen
                or len(msgs) < n
                or msgs[0].seq != ref.first
                or msgs[n - 1].seq != ref.through
                or _digest(msgs[:n]) != ref.digest
            ):
                raise Conflict(
                    f"context {st.id}: the messages this plan folds changed since version "
                    f"{ref.base} (another compaction or a deletion); plan again"
                )
            folded_tokens = sum(m.tokens for m in msgs[:n])
            new = Summary(**{**addition.__dict__, "covers_messages": n})
            merged = merge(
                st.summary,
                new,
                cap=self.cfg.list_cap,
                narrative_max_chars=self.cfg.narrative_max_chars,
                now_ms=self.service.now(),
            )
            plan_text = [st.plan.render()] if st.plan is not None else []
            evict = skills_to_evict(
                [s.name for s in st.skills], msgs[n:], also_referenced_in=plan_text
            )
            before = st.est_tokens
            after = st.calibration.apply(st.msg_tokens - folded_tokens + _block_tokens(merged, st))
            out.update(folded=n, before=before, after=after, evict=evict)
            self._pending[st.id] = {"folded": n, "before": before, "after": after}
            return {
                "op": OP,
                "through": ref.through,
                "summary": merged.to_dict(),
                "evict": evict,
                "folded": n,
                "before": before,
                "after": after,
            }

        try:
            st, _ = await self.service.change(context_id, build, event="compaction")
        finally:
            self._pending.pop(context_id, None)
        after = st.est_tokens
        return ApplyResult(
            version=st.version,
            folded=out["folded"],
            tokens_before=out["before"],
            tokens_after=after,
            summary=Summary.from_dict(st.summary.to_dict()),
            evicted_skills=list(out["evict"]),
        )

    # -- compact (sidecar-driven) --------------------------------------------------------------
    def summariser(self, name: str):
        name = name or self.cfg.summariser
        found = self.summarisers.get(name)
        if found is None:
            known = ", ".join(sorted(self.summarisers)) or "none"
            raise InvalidArgument(
                "summariser", f"no summariser named {name!r} is configured (available: {known})"
            )
        return found

    async def compact(
        self,
        context_id: str,
        keep_last: int = 0,
        target_tokens: int = 0,
        instructions: str = "",
        summariser: str = "",
        *,
        trigger: str = "manual",
    ) -> CompactResult:
        """Plan, summarise with a plugin, apply."""
        keep, target = self._options(keep_last, target_tokens)
        if len(instructions) > MAX_INSTRUCTIONS_CHARS:
            raise InvalidArgument(
                "instructions", f"must be at most {MAX_INSTRUCTIONS_CHARS} characters"
            )
        plugin = self.summariser(summariser)
        st = await self.service.get(context_id)
        cut, reason = self._cut(st, keep, target)
        if cut is None:
            metrics.COMPACTIONS.labels(trigger, "declined").inc()
            return CompactResult(False, reason=reason, summariser=plugin.name)
        folded = list(st.messages[: cut.fold])
        previous = Summary.from_dict(st.summary.to_dict())
        ref = _Ref(st.gen, st.version, folded[0].seq, folded[-1].seq, len(folded), _digest(folded))
        try:
            done = await summarise(
                plugin,
                folded,
                previous,
                instructions=instructions,
                clip_chars=self.cfg.clip_chars,
                max_passes=self.cfg.max_passes,
                cap=self.cfg.list_cap,
                narrative_max_chars=self.cfg.narrative_max_chars,
            )
            applied = await self._commit(context_id, ref, done.summary)
        except CtxdError:
            metrics.COMPACTIONS.labels(trigger, "failed").inc()
            raise
        metrics.COMPACTIONS.labels(trigger, "ok").inc()
        if trigger == "manual":
            self._succeeded(context_id)
        log.info(
            "context compacted",
            extra={
                "context": context_id,
                "trigger": trigger,
                "summariser": plugin.name,
                "folded": applied.folded,
                "tokens_before": applied.tokens_before,
                "tokens_after": applied.tokens_after,
            },
        )
        return CompactResult(True, summariser=plugin.name, applied=applied)

    # -- automatic trigger ---------------------------------------------------------------------
    def _succeeded(self, cid: str) -> None:
        auto = self._auto.get(cid)
        if auto is not None:
            auto.backoff.record_success()

    def backoff_status(self, cid: str):
        """The automatic trigger's back-off state for ``cid`` (None: never failed)."""
        auto = self._auto.get(cid)
        return None if auto is None else auto.backoff.status()

    def _maybe_auto(self, ev: ContextEvent, st: ContextState) -> None:
        if not self.contexts_cfg.auto_compact or not ev.detail.get("compaction_due"):
            return
        auto = self._auto.get(ev.context_id)
        if auto is None:
            auto = self._auto[ev.context_id] = _Auto(Backoff(self._policy, self._clock))
        if auto.task is not None and not auto.task.done():
            return
        if not auto.backoff.allowed():
            return
        target = int(AUTO_TARGET_SHARE * self.contexts_cfg.compact_at * st.model_window)
        auto.task = self._spawn(self._run_auto(ev.context_id, auto, max(1, target)))

    async def _run_auto(self, cid: str, auto: _Auto, target: int) -> None:
        try:
            result = await self.compact(cid, target_tokens=target, trigger="auto")
        except NotFound:
            self._auto.pop(cid, None)
            return
        except Conflict:
            return  # another compaction folded this prefix first: nothing failed
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure backs off, never loops
            message = exc.message if isinstance(exc, CtxdError) else type(exc).__name__
            if not isinstance(exc, CtxdError):
                log.exception("automatic compaction crashed", extra={"context": cid})
            status = auto.backoff.record_failure(message)
            if status.stopped:
                then = "automatic compaction stopped"
                if status.retry_in is not None:
                    then += f" for {status.retry_in:.0f}s"
            else:
                then = f"next automatic attempt in {status.retry_in:.0f}s"
            detail = f"failure {status.failures}: {message}; {then}"
            log.warning(
                "automatic compaction failed",
                extra={
                    "context": cid,
                    "failures": status.failures,
                    "error": message,
                    "stopped": status.stopped,
                },
            )
            st = self.service.registry.peek(cid)
            version = st.state.version if st is not None and st.state is not None else 0
            self._publish(
                WatchEvent(cid, "compaction_failed", version, self.service.now(), detail=detail)
            )
            return
        if result.compacted:
            auto.backoff.record_success()

    # -- events ------------------------------------------------------------------------------------
    def _on_event(self, ev: ContextEvent, st: ContextState | None) -> None:
        if ev.kind == "turn" and st is not None:
            self._maybe_auto(ev, st)
        if ev.kind == "deleted":
            auto = self._auto.pop(ev.context_id, None)
            if auto is not None and auto.task is not None:
                auto.task.cancel()
        if not self._subs.get(ev.context_id):
            return
        out = WatchEvent(ev.context_id, ev.kind, ev.version, ev.ts)
        if ev.kind == "compaction":
            d = self._pending.get(ev.context_id, {})
            out = WatchEvent(
                ev.context_id,
                ev.kind,
                ev.version,
                ev.ts,
                tokens_before=d.get("before", 0),
                tokens_after=st.est_tokens if st is not None else d.get("after", 0),
                folded=d.get("folded", 0),
            )
        elif ev.kind == "turn" and st is not None:
            out = WatchEvent(
                ev.context_id,
                ev.kind,
                ev.version,
                ev.ts,
                tokens_after=st.est_tokens,
                detail="compaction due" if ev.detail.get("compaction_due") else "",
            )
        self._publish(out)

    def _publish(self, ev: WatchEvent) -> None:
        subs = self._subs.get(ev.context_id)
        if not subs:
            return
        for sub in list(subs):
            sub.push(ev)
        if ev.kind == "deleted":
            self._subs.pop(ev.context_id, None)

    async def watch(self, context_id: str, maxlen: int = WATCH_QUEUE) -> Subscription:
        """Subscribe to ``context_id``'s events (it must exist)."""
        st = await self.service.get(context_id)
        sub = Subscription(st.id, maxlen)
        self._subs.setdefault(st.id, set()).add(sub)
        return sub

    def unwatch(self, sub: Subscription) -> None:
        sub.close()
        subs = self._subs.get(sub.context_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.context_id]
