"""What survives successive compactions: recall of planted artifacts.

The corpus (:mod:`bench.fidelity_corpus`: seeded coding, ops and research
sessions, :data:`SESSIONS` of them) is replayed batch by batch; after each
batch the conversation is compacted, keeping the last :data:`KEEP_LAST`
messages, five times in all. After 1, 3 and 5 compactions, **recall** is
the share of the artifacts planted in folded messages (and not repeated in
the kept ones) that the context still holds verbatim: the summary block as
rendered for the model, and the kept messages. Per kind and in all, summed
over the sessions. Compared, each given the same summariser:

========================= ===============================================
system                    what a compaction does
========================= ===============================================
``ctxd.extractive``       ctxd's fold (cut → summariser → merge with the
                          artifact ledger, default budget) with the
                          built-in extractive summariser
``ctxd.model``            the same with the ``openai`` summariser talking
                          to a deterministic stand-in model on loopback
                          (:mod:`bench.standin_model`)
``summary_only.*``        the same summaries merged without the ledger
``langchain.model``       LangChain's ``SummarizationMiddleware`` (v1,
                          ``keep=("messages", KEEP_LAST)``), its summary
                          from the same stand-in model (``ChatOpenAI``)
========================= ===============================================

Also per system: **span shrink**, ``1 - summary after / (summary before +
folded messages)`` in estimated tokens, averaged over every fold (per fold
number in ``extra["by_fold_pct"]``: later folds shrink less, as the lists
fill to their caps and the ledger grows toward its budget); and for
ctxd the fidelity report's score (:func:`ctxd_sidecar.core.compaction.
fidelity.measure`) averaged over folds. Rows: ``fidelity.recall.<system>
[.<kind>].c<n>`` (%), ``fidelity.shrink.<system>`` (%),
``fidelity.report_score.<system>`` (%); targets in :func:`add_checks`.
The pipeline runs in-process (no gRPC): the domain functions a compaction
calls.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from bench.ctxd_ledger import slice_text
from bench.fidelity_corpus import KINDS, Message, Session, corpus
from bench.harness import Context, Result, register
from bench.report import Report
from ctxd_plugins.extractive_summariser import ExtractiveSummariser
from ctxd_sidecar.core.compaction import MessageData, ToolCallData, merge, plan_cut, summarise
from ctxd_sidecar.core.compaction.fidelity import measure
from ctxd_sidecar.core.compaction.ledger import DEFAULT_LEDGER_CAP
from ctxd_sidecar.core.compaction.summary import Summary
from ctxd_sidecar.core.estimate import estimate_text

GROUP = "fidelity"
SESSIONS = 210
QUICK_SESSIONS = 30
KEEP_LAST = 6
MARKS = (1, 3, 5)
SYSTEMS = (
    "ctxd.extractive",
    "ctxd.model",
    "summary_only.extractive",
    "summary_only.model",
    "langchain.model",
)
#: Targets: recall after 1 and 5 compactions (%), span shrink (%).
RECALL_TARGETS = {1: 99.0, 5: 95.0}
SHRINK_TARGET = 50.0


class Tally:
    """Found / wanted per (mark, kind), shrink and report scores per fold."""

    def __init__(self) -> None:
        self.found: dict[tuple[int, str], int] = defaultdict(int)
        self.wanted: dict[tuple[int, str], int] = defaultdict(int)
        self.shrink: list[float] = []
        self.scores: list[float] = []
        self.ledger_bytes = 0

    def recall(self, mark: int, kind: str | None = None) -> float:
        kinds = KINDS if kind is None else (kind,)
        wanted = sum(self.wanted[mark, k] for k in kinds)
        return 100.0 * sum(self.found[mark, k] for k in kinds) / wanted if wanted else 100.0

    def count(self, mark: int, kind: str | None = None) -> int:
        return sum(self.wanted[mark, k] for k in (KINDS if kind is None else (kind,)))


def _data(m: Message, seq: int) -> MessageData:
    calls = tuple(ToolCallData(cid, name, args) for cid, name, args in m.calls)
    return MessageData(
        m.kind, f"m{seq}", text=m.text, tool_calls=calls, call_id=m.call_id, name=m.name,
        content=m.content, is_error=m.is_error, seq=seq,
    )  # fmt: skip


def _score(tally: Tally, mark: int, planted: list[Message], kept_text: str, context: str) -> None:
    """Count the planted artifacts of ``planted`` (the folded messages)."""
    wanted = {a for m in planted for a in m.planted if a[1] not in kept_text}
    for kind, text in wanted:
        tally.wanted[mark, kind] += 1
        tally.found[mark, kind] += text in context


async def _ctxd(session: Session, tally: Tally, summariser, ledger: bool) -> None:
    live: list[tuple[Message, MessageData]] = []
    folded_all: list[Message] = []
    summary = Summary()
    seq = 0
    for n, batch in enumerate(session.batches, start=1):
        for m in batch:
            live.append((m, _data(m, seq)))
            seq += 1
        cut = plan_cut([d for _, d in live], KEEP_LAST)
        if not hasattr(cut, "fold"):
            raise RuntimeError(f"session {session.seed}: compaction {n} declined: {cut.reason}")
        folded, live = live[: cut.fold], live[cut.fold :]
        views = [d for _, d in folded]
        result = await summarise(summariser, views, summary)
        before = summary
        summary = merge(
            summary, result.summary, folded=views if ledger else None,
            ledger_cap=DEFAULT_LEDGER_CAP, now_ms=n,
        )  # fmt: skip
        span = sum(d.tokens for d in views)
        tally.shrink.append(
            1 - estimate_text(summary.render()) / (estimate_text(before.render()) + span)
        )
        if ledger:
            tally.scores.append(measure(views, before, summary).score)
            tally.ledger_bytes = max(tally.ledger_bytes, summary.ledger.byte_size())
        folded_all += [m for m, _ in folded]
        if n in MARKS:
            kept = [d for _, d in live]
            kept_text = slice_text(Summary(), kept)
            _score(tally, n, folded_all, kept_text, slice_text(summary, kept))


def _langchain_messages(batch: list[Message], start: int) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = []
    for i, m in enumerate(batch, start=start):
        if m.kind == "user":
            out.append(HumanMessage(m.text, id=f"m{i}"))
        elif m.kind == "assistant":
            calls = [{"id": c, "name": n, "args": json.loads(a)} for c, n, a in m.calls]
            out.append(AIMessage(m.text, tool_calls=calls, id=f"m{i}"))
        else:
            out.append(ToolMessage(m.content, tool_call_id=m.call_id, name=m.name, id=f"m{i}"))
    return out


def _lc_text(messages: list[Any]) -> str:
    parts = []
    for m in messages:
        parts.append(m.content if isinstance(m.content, str) else json.dumps(m.content))
        parts += [f"{c['name']} {json.dumps(c['args'])}" for c in getattr(m, "tool_calls", [])]
    return "\n".join(parts)


def _langchain(session: Session, tally: Tally, middleware) -> None:
    by_id: dict[str, Message] = {}
    state: list[Any] = []
    folded_all: list[Message] = []
    start = 0
    for n, batch in enumerate(session.batches, start=1):
        new = _langchain_messages(batch, start)
        by_id.update({lm.id: m for lm, m in zip(new, batch, strict=True)})
        start += len(batch)
        state += new
        update = middleware.before_model({"messages": state}, None)
        if update is None:
            raise RuntimeError(f"session {session.seed}: LangChain did not summarise at {n}")
        summary_msg, *kept = update["messages"][1:]
        kept_ids = {m.id for m in kept}
        gone = [m for m in state if m.id not in kept_ids]
        before = next((m for m in gone if m.id not in by_id), None)
        span = sum(_data(by_id[m.id], 0).tokens for m in gone if m.id in by_id)
        old = estimate_text(before.content) if before is not None else 0
        tally.shrink.append(1 - estimate_text(summary_msg.content) / (old + span))
        folded_all += [by_id[m.id] for m in gone if m.id in by_id]
        state = [summary_msg, *kept]
        if n in MARKS:
            _score(tally, n, folded_all, _lc_text(kept), _lc_text(state))


def _middleware(base_url: str):
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(
        model="stand-in", base_url=base_url, api_key="no-key", max_retries=0, temperature=0
    )
    return SummarizationMiddleware(
        model, trigger=("messages", KEEP_LAST + 1), keep=("messages", KEEP_LAST)
    )


def run(sessions: int, skip=lambda what, why: None) -> dict[str, Tally]:
    """Replay ``sessions`` sessions through every system; tallies by system."""
    from bench.standin_model import StandinModel

    data = corpus(sessions)
    tallies = {name: Tally() for name in SYSTEMS}
    with StandinModel() as model:
        summarisers: list[tuple[str, Any]] = [("extractive", ExtractiveSummariser())]
        if importlib.util.find_spec("openai") is None:
            for name in ("ctxd.model", "summary_only.model"):
                skip(name, "the openai package is not installed: pip install '.[bench]'")
                del tallies[name]
        else:
            from ctxd_plugins.openai_summariser import OpenAISummariser

            summarisers.append(("model", OpenAISummariser(
                base_url=model.base_url, model="stand-in", max_retries=0, timeout=30,
                max_output_tokens=1024, window=8192, response_format="json_object",
            )))  # fmt: skip
        asyncio.run(_ctxd_runs(data, tallies, summarisers))
        try:
            middleware = _middleware(model.base_url)
        except ImportError as exc:
            skip("langchain.model", f"LangChain not installed ({exc.name}): pip install '.[bench]'")
            del tallies["langchain.model"]
        else:
            for s in data:
                _langchain(s, tallies["langchain.model"], middleware)
    return tallies


async def _ctxd_runs(data: list[Session], tallies: dict[str, Tally], summarisers) -> None:
    try:
        for s in data:
            for name, summariser in summarisers:
                await _ctxd(s, tallies[f"ctxd.{name}"], summariser, ledger=True)
                await _ctxd(s, tallies[f"summary_only.{name}"], summariser, ledger=False)
    finally:
        for _, summariser in summarisers:
            close = getattr(summariser, "aclose", None)
            if close is not None:
                await close()


def recall_name(system: str, mark: int, kind: str | None = None) -> str:
    return f"fidelity.recall.{system}{'.' + kind if kind else ''}.c{mark}"


@register(GROUP)
def fidelity_suite(ctx: Context) -> Iterator[Result]:
    """Recall per system, kind and number of compactions; span shrink; report scores."""
    sessions = ctx.pick(full=SESSIONS, quick=QUICK_SESSIONS)
    tallies = run(sessions, ctx.skip)
    common = {"sessions": sessions, "keep_last": KEEP_LAST}
    for system, t in tallies.items():
        for mark in MARKS:
            for kind in (None, *KINDS):
                yield Result(
                    recall_name(system, mark, kind), GROUP, "%", t.recall(mark, kind), None,
                    max(1, t.count(mark, kind)), {**common, "artifacts": t.count(mark, kind)},
                )  # fmt: skip
        shrink = 100.0 * sum(t.shrink) / len(t.shrink)
        extra = {**common, "folds": len(t.shrink), "min_pct": round(100 * min(t.shrink), 1)}
        per = len(t.shrink) // sessions  # folds per session, in order
        extra["by_fold_pct"] = [
            round(100 * sum(t.shrink[i::per]) / len(t.shrink[i::per]), 1) for i in range(per)
        ]
        yield Result(f"fidelity.shrink.{system}", GROUP, "%", shrink, None, len(t.shrink), extra)
        if t.scores:
            extra = {**common, "min_pct": round(100 * min(t.scores), 1)}
            extra["ledger_bytes_max"] = t.ledger_bytes
            score = 100.0 * sum(t.scores) / len(t.scores)
            yield Result(
                f"fidelity.report_score.{system}", GROUP, "%", score, None, len(t.scores), extra
            )


def add_checks(report: Report) -> None:
    """Recall after 1 and 5 compactions for ctxd, and the extractive span shrink."""
    for system in ("ctxd.extractive", "ctxd.model"):
        for mark, limit in RECALL_TARGETS.items():
            row = report.get(recall_name(system, mark))
            if row is None:
                continue
            report.add_check(
                f"target.fidelity.recall.{system}.c{mark}",
                f"{system}: planted artifacts recalled after {mark} compaction(s)",
                source=row.name, value=row.p50, op=">=", limit=limit, unit="%",
            )  # fmt: skip
    row = report.get("fidelity.shrink.ctxd.extractive")
    if row is not None:
        report.add_check(
            "target.fidelity.shrink.ctxd.extractive",
            "ctxd.extractive: a fold's span shrink (mean over folds)",
            source=row.name, value=row.p50, op=">=", limit=SHRINK_TARGET, unit="%",
        )  # fmt: skip
