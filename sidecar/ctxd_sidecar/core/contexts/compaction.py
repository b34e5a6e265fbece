"""Compaction of a context: plan, apply and compact.

:class:`Compactor` works over a :class:`ContextService`; the rules (where to
cut, how answers are read and merged, which skills are evicted) live in
:mod:`ctxd_sidecar.core.compaction`. The automatic trigger is :mod:`.auto`; the
events watchers see come from the ``compact`` record through the feed
(:mod:`.events`).

**Plans are stateless.** ``PlanCompaction`` hands out a ``plan_ref`` that
encodes the context incarnation, the base version, the folded prefix (first
and last message seq, count) and a hash of the folded message ids. Apply
folds exactly that prefix if it is still the live prefix of the transcript
(ABORTED otherwise: another compaction or a deletion came in between);
turns appended after the plan stay, so any number of sidecars can apply a
plan another one made.

**The ``compact`` log record** is the commit and the checkpoint of a
compaction (the head and segments catch up on the usual schedule, see
:mod:`ctxd_sidecar.core.contexts`). It carries everything its replay needs, decided
before the write: the seq folded through, the merged summary as stored, the
skills whose bodies are evicted, and (for the event feed) the folded count
and the token estimates before and after. Evicted skills leave the
context's loaded set, so their bodies leave the prompt; their names stay in
the skills catalogue (and ``evicted_skills`` of the reply tells the
runtime), and a later ``@skill:`` reference loads them again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from ctxd_sidecar.core.compaction import (
    ANSWER_SCHEMA_JSON,
    Cut,
    LedgerCap,
    Summary,
    abandoned_calls,
    build_excerpt,
    build_system_prompt,
    guard,
    merge,
    plan_cut,
    skills_to_evict,
    summarise,
)
from ctxd_sidecar.core.compaction.errors import SummariserError
from ctxd_sidecar.core.compaction.fidelity import Fidelity
from ctxd_sidecar.core.contexts import compaction_report as report
from ctxd_sidecar.core.contexts.archive import new_record
from ctxd_sidecar.core.contexts.cachefx import CacheEffect, _block_tokens, cache_effect
from ctxd_sidecar.core.contexts.model import TOOL, ContextState, Msg
from ctxd_sidecar.core.contexts.planref import PlanRef, digest
from ctxd_sidecar.core.contexts.redaction import redacted
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.errors import Conflict, CtxdError, FailedPrecondition, InvalidArgument
from ctxd_sidecar.core.observe import CompactionHooks, CompactionObserver, NoHooks, NullObserver

log = logging.getLogger(__name__)

OP = "compact"
#: Longest answer ApplyCompaction accepts (characters).
MAX_ANSWER_CHARS = 1024 * 1024
#: Longest ``instructions`` Compact accepts (characters).
MAX_INSTRUCTIONS_CHARS = 8 * 1024


class WouldGrow(FailedPrecondition):
    """The merged summary would take more than the messages it replaces: a
    compaction ctxd runs (Compact, the automatic trigger) never makes a
    context larger, and declines with this reason. ApplyCompaction applies
    the runtime's own answer as given (its reply's tokens_after says what it
    did): an import restores a summary that way."""


# -- results ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompactionPlan:
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
    cache: CacheEffect | None = None


@dataclass(frozen=True)
class ApplyResult:
    version: int
    folded: int
    tokens_before: int
    tokens_after: int
    summary: Summary
    evicted_skills: list[str]
    cache: CacheEffect | None = None
    record: dict[str, Any] | None = None
    fidelity: Fidelity | None = None


@dataclass(frozen=True)
class CompactResult:
    compacted: bool
    reason: str = ""
    summariser: str = ""
    applied: ApplyResult | None = None


def _answered_after(msgs: list[Msg], n: int) -> str:
    """The first call among the first ``n`` messages that a later message
    answers ("" if none). The cut never folds such a call, but a result can
    arrive between a plan and its apply (an abandoned call's late result).

    Calls are told apart by position: a result answers the latest earlier
    call with its id, so a kept result for a reused id (``call0`` in every
    round) answers the kept call, not a folded one."""
    owner: dict[str, int] = {}
    for i, m in enumerate(msgs):
        for c in m.tool_calls:
            owner[c.id] = i
        if m.kind == TOOL and i >= n and owner.get(m.call_id, n) < n:
            return m.call_id
    return ""


def _abandoned_notes(abandoned: list, turns: int) -> list[str]:
    """The open items saying which calls a fold treated as abandoned."""
    return [
        f"tool call {c.id} ({c.name}) got no result for {turns} user turns; treated as "
        "abandoned (a late result is still recorded)"
        for c in abandoned
    ]


# -- the use case ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Fold:
    """A compaction decided on one state: what it folds and the log record
    that commits it (``op`` compaction)."""

    folded: int
    before: int
    after: int
    evict: list[str]
    fidelity: Fidelity
    cache: CacheEffect
    record: dict[str, Any]


def _check_still_folds(st: ContextState, ref: PlanRef) -> None:
    """Conflict unless ``st`` still begins with the messages ``ref`` planned
    to fold, and folding them leaves no tool result without its call."""
    msgs, n = st.messages, ref.count
    if (
        st.gen != ref.gen
        or len(msgs) < n
        or msgs[0].seq != ref.first
        or msgs[n - 1].seq != ref.through
        or digest(msgs[:n]) != ref.digest
    ):
        raise Conflict(
            f"context {st.id}: the messages this plan folds changed since version "
            f"{ref.base} (another compaction or a deletion); plan again"
        )
    answered = _answered_after(msgs, n)
    if answered:
        raise Conflict(
            f"context {st.id}: tool call {answered} that this plan folds got its "
            f"result after version {ref.base}, and folding the call would leave the "
            "result without it; plan again"
        )


class Compactor:
    """Plan, apply and run compactions of contexts held by ``service``.

    ``config`` is the whole configuration (``contexts`` and ``compaction``
    sections); ``summarisers`` maps names to summariser plugins.
    """

    def __init__(
        self,
        service: ContextService,
        config,
        summarisers: dict[str, Any],
        *,
        observer: CompactionObserver | None = None,
        hooks: CompactionHooks | None = None,
        notes: Callable[[str, str], Awaitable[object]] | None = None,
    ) -> None:
        self.service = service
        self.contexts_cfg = config.contexts
        self.cfg = config.compaction
        self.summarisers = summarisers
        self.observer: CompactionObserver = observer or NullObserver()
        self.hooks: CompactionHooks = hooks or NoHooks()
        #: Appends a plugin's note, returned after a compaction, to a context.
        self.append_note = notes

    async def stop(self) -> None:
        """Close the summarisers (their HTTP clients)."""
        for s in self.summarisers.values():
            close = getattr(s, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    # -- plan --------------------------------------------------------------------------------------
    def _options(self, keep_last: int, target_tokens: int) -> tuple[int, int | None]:
        if keep_last < 0:
            raise InvalidArgument("keep_last", "must not be negative (0 uses the default)")
        if target_tokens < 0:
            raise InvalidArgument("target_tokens", "must not be negative (0 means no target)")
        return keep_last or self.contexts_cfg.keep_last, target_tokens or None

    def _cut(self, st: ContextState, keep_last: int, target: int | None) -> tuple[Cut | None, str]:
        decided = plan_cut(
            st.messages,
            keep_last,
            target,
            abandon_after=self.cfg.open_call_max_turns,
            round_cuts=True,
        )
        if isinstance(decided, Cut):
            return decided, ""
        return None, decided.reason

    async def plan(
        self, context_id: str, keep_last: int = 0, target_tokens: int = 0
    ) -> CompactionPlan:
        keep, target = self._options(keep_last, target_tokens)
        st = await self.service.get(context_id)
        # Read without awaiting: the record is the live object.
        cut, reason = self._cut(st, keep, target)
        if cut is None:
            return CompactionPlan(
                True, reason=reason, base_version=st.version, tokens_before=st.est_tokens
            )
        folded = st.messages[: cut.fold]
        ref = PlanRef(
            st.gen, st.version, folded[0].seq, folded[-1].seq, len(folded), digest(folded)
        )
        previous = st.summary if not st.summary.is_empty() else None
        # The model's answer is not known yet: estimate with what ctxd adds
        # itself (the previous summary and the ledger of the folded messages).
        estimate = merge(
            st.summary,
            Summary(covers_messages=len(folded)),
            cap=self.cfg.list_cap,
            narrative_max_chars=self.cfg.narrative_max_chars,
            folded=folded,
            ledger_cap=LedgerCap(self.cfg.ledger_max_items, self.cfg.ledger_max_bytes),
        )
        return CompactionPlan(
            False,
            plan_ref=ref.encode(),
            base_version=st.version,
            fold_count=len(folded),
            fold_through_id=cut.fold_through_id,
            system_prompt=build_system_prompt(),
            excerpt=build_excerpt(
                self._redacted(st.id, folded), previous, clip_chars=self.cfg.clip_chars
            ),
            answer_schema_json=ANSWER_SCHEMA_JSON,
            tokens_before=st.est_tokens,
            cache=cache_effect(st, estimate, len(folded)),
        )

    # -- apply -------------------------------------------------------------------------------------
    async def apply(self, context_id: str, plan_ref: str, answer: str) -> ApplyResult:
        """Fold the planned prefix into the summary with the runtime's answer."""
        ref = PlanRef.decode(plan_ref)
        if len(answer) > MAX_ANSWER_CHARS:
            raise InvalidArgument("answer", f"is longer than {MAX_ANSWER_CHARS} characters")
        try:
            summary = guard.read(answer)
        except SummariserError as exc:
            report.refused(self.observer, context_id, "runtime", exc)
            raise guard.RefusedAnswer(
                exc.reason, f"{exc.message}; send the model's JSON answer or plain text"
            ) from None
        try:
            result = await self._commit(context_id, ref, summary, by="runtime", trigger="runtime")
        except SummariserError as exc:  # low fidelity
            report.refused(self.observer, context_id, "runtime", exc)
            raise
        except CtxdError:
            self.observer.compaction("runtime", "failed")
            raise
        self.observer.compaction("runtime", "ok")
        report.compacted(self.observer, context_id, "runtime", "runtime", result)
        return result

    async def _commit(
        self, context_id: str, ref: PlanRef, addition: Summary, *, by: str, trigger: str
    ) -> ApplyResult:
        """Decide the fold on the state the transaction holds and commit it
        (deciding again after a lost race), then let plugins act on it; only
        the runtime's own answer may grow the context."""
        async with self.service.transaction(context_id) as tx:
            while await tx.next():
                fold = self._fold(tx.state, ref, addition, by=by, trigger=trigger)
                if await tx.commit({**fold.record, "ts": self.service.now()}, event="compaction"):
                    st = tx.state
                    # Copied before awaiting: the record is the live object.
                    record = dict(st.compactions[-1]) if st.compactions else None
                    kept = list(st.messages)
                    result = ApplyResult(
                        version=st.version,
                        folded=fold.folded,
                        tokens_before=fold.before,
                        tokens_after=st.est_tokens,
                        summary=Summary.from_dict(st.summary.to_dict()),
                        evicted_skills=list(fold.evict),
                        cache=fold.cache,
                        record=record,
                        fidelity=fold.fidelity,
                    )
                    break
            else:
                raise AssertionError("unreachable: Missing.NOT_FOUND raises")
        if record is not None:
            await self._after_compaction(context_id, record, kept)
        return result

    def _fold(
        self, st: ContextState, ref: PlanRef, addition: Summary, *, by: str, trigger: str
    ) -> Fold:
        """The fold of ``ref``'s messages into the summary, decided on ``st``
        (domain errors when the plan no longer fits it; nothing is written)."""
        msgs, n = st.messages, ref.count
        _check_still_folds(st, ref)
        folded_tokens = sum(m.tokens for m in msgs[:n])
        abandoned = self._abandoned(msgs, n)
        notes = _abandoned_notes(abandoned, self.cfg.open_call_max_turns)
        new = replace(addition, covers_messages=n, open=[*addition.open, *notes])
        folded = self._redacted(st.id, msgs[:n])
        merged = merge(
            st.summary,
            new,
            cap=self.cfg.list_cap,
            narrative_max_chars=self.cfg.narrative_max_chars,
            now_ms=self.service.now(),
            folded=folded,
            ledger_cap=LedgerCap(self.cfg.ledger_max_items, self.cfg.ledger_max_bytes),
        )
        fidelity = report.measure_fold(st, folded, merged, self.cfg.min_fidelity)
        plan_text = [st.plan.render()] if st.plan is not None else []
        evict = skills_to_evict([s.name for s in st.skills], msgs[n:], also_referenced_in=plan_text)
        before = st.est_tokens
        after = st.calibration.apply(st.msg_tokens - folded_tokens + _block_tokens(merged, st))
        if after > before and trigger != "runtime":
            raise _would_grow(st, n, folded_tokens, before, after)
        cache = cache_effect(st, merged, n)
        sealed = new_record(
            msgs[:n],
            before=before,
            after=after,
            artifacts=len(merged.ledger),
            by=by,
            fidelity=fidelity.to_dict(),
            trigger=trigger,
            predicted_writes=cache.tokens_rewritten,
        )
        record = _fold_record(ref, merged, evict, abandoned, before, after, sealed)
        return Fold(n, before, after, evict, fidelity, cache, record)

    def _redacted(self, context_id: str, msgs: list[Msg]) -> list:
        """The messages as they may leave ctxd for a summariser model."""
        return redacted(self.hooks, context_id, msgs)

    async def _after_compaction(self, cid: str, record: dict, kept: list[Msg]) -> None:
        """Plugins act on the committed compaction; nothing they do can undo it."""
        notes = self.hooks.compacted(cid, self.service.compaction_info(record), kept)
        for note in notes:
            if self.append_note is None:
                break
            try:
                await self.append_note(cid, note)
            except CtxdError as exc:
                log.warning(
                    "compaction note not appended", extra={"context": cid, "error": str(exc)}
                )

    def _abandoned(self, msgs: list[Msg], n: int) -> list:
        """The calls without a result this fold takes (only abandoned ones can be)."""
        out = []
        for index, call_id in abandoned_calls(msgs, self.cfg.open_call_max_turns):
            if index < n:
                out.extend(c for c in msgs[index].tool_calls if c.id == call_id)
        return out

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
            self.observer.compaction(trigger, "declined")
            return CompactResult(False, reason=reason, summariser=plugin.name)
        folded = list(st.messages[: cut.fold])
        previous = Summary.from_dict(st.summary.to_dict())
        ref = PlanRef(
            st.gen, st.version, folded[0].seq, folded[-1].seq, len(folded), digest(folded)
        )
        try:
            done = await summarise(
                plugin,
                self._redacted(context_id, folded),
                previous,
                instructions=instructions,
                clip_chars=self.cfg.clip_chars,
                max_passes=self.cfg.max_passes,
                cap=self.cfg.list_cap,
                narrative_max_chars=self.cfg.narrative_max_chars,
            )
            guard.check(done.summary, f"summariser {plugin.name!r}'s answer")
            applied = await self._commit(
                context_id, ref, done.summary, by=plugin.name, trigger=trigger
            )
        except SummariserError as exc:
            if exc.reason not in guard.REASONS:
                self.observer.compaction(trigger, "failed")
            else:
                report.refused(self.observer, context_id, trigger, exc)
            raise
        except WouldGrow as exc:
            self.observer.compaction(trigger, "declined")
            return CompactResult(False, reason=exc.message, summariser=plugin.name)
        except CtxdError:
            self.observer.compaction(trigger, "failed")
            raise
        self.observer.compaction(trigger, "ok")
        report.compacted(self.observer, context_id, trigger, plugin.name, applied)
        return CompactResult(True, summariser=plugin.name, applied=applied)


def _would_grow(st: ContextState, n: int, folded_tokens: int, before: int, after: int) -> WouldGrow:
    return WouldGrow(
        f"context {st.id}: folding {n} messages ({folded_tokens} tokens) into this "
        f"summary would take the context from {before} to {after} tokens; a "
        "compaction never makes a context larger (fold more, or answer shorter)"
    )


def _fold_record(
    ref: PlanRef,
    merged: Summary,
    evict: list[str],
    abandoned: list,
    before: int,
    after: int,
    sealed: dict[str, Any],
) -> dict[str, Any]:
    """The log record of a fold (``sealed``: its compaction record)."""
    return {
        "op": OP,
        "through": ref.through,
        "summary": merged.to_dict(),
        "evict": evict,
        "abandoned": [[c.id, c.name, c.arguments_json] for c in abandoned],
        "folded": ref.count,
        "before": before,
        "after": after,
        "record": sealed,
    }
