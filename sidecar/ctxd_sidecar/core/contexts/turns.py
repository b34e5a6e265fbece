"""AppendTurn: one turn, one versioned change, durable before it returns.

A turn is validated whole (ids, sizes, tool results answering calls), then
written as one ``append`` record. ``@skill:<name>`` references in the turn's
own text (tool results carry outside content and are not read) are resolved
*before* the context's lock is taken: bodies the catalogue can fetch within
:data:`PRELOAD_WAIT` seconds are loaded by the same record, so the turn and
its skills are one version. A load that takes longer (a slow server) goes
on in the background and commits its own ``skills`` change; a server that
is down never fails or delays the turn past that wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ctxd_sidecar.core.contexts import validate
from ctxd_sidecar.core.contexts.model import ASSISTANT, TOOL, ContextState, Msg, SkillRef
from ctxd_sidecar.core.contexts.reads import ReadRequest
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.contexts.tokens import window_for_model
from ctxd_sidecar.core.contexts.transaction import Missing
from ctxd_sidecar.core.errors import CtxdError, InvalidArgument

log = logging.getLogger(__name__)

#: Longest an AppendTurn reply waits for the skills its messages reference.
PRELOAD_WAIT = 1.0
#: Largest model window accepted (tokens).
MAX_MODEL_WINDOW = 100_000_000


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
    #: CreateContext: a turn without messages that only makes the context exist.
    create: bool = False
    #: A read to answer with the turn (its record is :attr:`TurnResult.read_back`).
    read: ReadRequest | None = None


@dataclass(frozen=True, slots=True)
class TurnResult:
    version: int
    est_tokens: int
    compaction_due: bool
    message_ids: list[str]
    replayed: bool = False
    #: Skills this turn's ``@skill:`` references loaded (with the turn).
    loaded_skills: list[SkillRef] = field(default_factory=list)
    #: Referenced names the catalogue does not know.
    unknown_skills: list[str] = field(default_factory=list)
    #: The incarnation ``version`` belongs to (see :mod:`.views`).
    incarnation: str = ""
    #: The record the turn's read reads (None: no read, or no longer readable).
    read_back: ContextState | None = None


class SkillResolver(Protocol):
    """What a turn needs of the skills catalogue (see :mod:`.skillset`)."""

    def references(self, texts: list[str]) -> tuple[list[str], list[str]]:
        """The referenced names, split into (known, unknown)."""

    async def resolve(self, loaded: list[SkillRef], texts: list[str]) -> list[SkillRef]:
        """Refs of the referenced skills whose body is new or changed."""

    def apply(self, refs: list[SkillRef], wanted: list[SkillRef]) -> list[SkillRef]:
        """``wanted`` merged into ``refs`` within the cap: the refs that changed."""

    def load_later(self, context_id: str, pending: asyncio.Future[list[SkillRef]]) -> None:
        """Commit, as its own change, a resolution that did not fit the wait."""


def turn_texts(messages: Sequence[Msg]) -> list[str]:
    """Where a turn may reference ``@skill:<name>``: every message's own text."""
    return [m.text for m in messages if m.kind != TOOL and m.text]


class Turns:
    """The AppendTurn use case over a :class:`ContextService`."""

    def __init__(self, contexts: ContextService, skills: SkillResolver | None = None) -> None:
        self.contexts = contexts
        self.config = contexts.config
        self.skills = skills

    def check(self, req: TurnRequest) -> str:
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
        if req.create and not req.messages:
            return cid
        validate.turn(
            req.messages,
            max_messages=self.config.max_turn_messages,
            max_message_bytes=self.config.max_message_bytes,
        )
        return cid

    async def append(self, req: TurnRequest) -> TurnResult:
        """Append one turn atomically; durable before it returns. With
        ``req.read``, the result holds the record to answer it from, read
        without awaiting (it is live)."""
        result = await self._append(req)
        if req.read is None:
            return result
        return replace(result, read_back=await self._read_back(req.context_id, req.read, result))

    async def _read_back(
        self, cid: str, read: ReadRequest, result: TurnResult
    ) -> ContextState | None:
        """The record ``read`` reads after the turn (see
        :meth:`~.reads.ReadRequest.after_turn`); None when it cannot be read:
        deleted since the commit, the turn stands, and an error now would
        invite a retry of what is already durable."""
        try:
            return await self.contexts.get(cid, latest=read.after_turn(result.replayed))
        except CtxdError:
            return None

    async def _append(self, req: TurnRequest) -> TurnResult:
        cid = self.check(req)
        wanted, unknown, pending = await self._preload(cid, req)
        async with self.contexts.transaction(
            cid,
            expected_version=req.expected_version,
            missing=Missing.CREATE,
            idempotency_key=req.idempotency_key,
        ) as tx:
            while await tx.next():
                st = tx.state
                if tx.replayed is not None:
                    return _result(tx.replayed, replayed=True, incarnation=st.gen)
                validate.tool_results_answer_calls(
                    req.messages, st.calls.ids | st.abandoned.keys(), st.calls.answered
                )
                loaded: list[SkillRef] = []
                skills = None
                if wanted and self.skills is not None:
                    refs = list(st.skills)
                    loaded = self.skills.apply(refs, wanted)
                    skills = refs if loaded else None
                rec, built, result = self._record(st, req, skills)
                detail = {"messages": len(built), "compaction_due": result["compaction_due"]}
                if await tx.commit(rec, event="turn", built=built, detail=detail):
                    break
        if pending is not None and self.skills is not None:
            self.skills.load_later(cid, pending)
        return _result(result, loaded=loaded, unknown=unknown, incarnation=st.gen)

    async def _preload(
        self, cid: str, req: TurnRequest
    ) -> tuple[list[SkillRef], list[str], asyncio.Future | None]:
        """Skills the turn references, fetched within the wait: (refs to load
        with the turn, unknown names, a resolution still running)."""
        if self.skills is None:
            return [], [], None
        texts = turn_texts(req.messages)
        known, unknown = self.skills.references(texts)
        if not known:
            return [], unknown, None
        st = self.contexts.resident(cid)
        if st is None:
            try:
                st = await self.contexts.read(cid)
            except Exception:  # noqa: BLE001 - the turn reports its own errors
                st = None
        if st is not None and req.idempotency_key and req.idempotency_key in st.idem:
            return [], unknown, None
        current = list(st.skills) if st is not None else []
        task = asyncio.ensure_future(self.skills.resolve(current, texts))
        try:
            wanted = await asyncio.wait_for(asyncio.shield(task), PRELOAD_WAIT)
        except TimeoutError:
            return [], unknown, task
        except Exception as exc:  # noqa: BLE001 - a reference never fails the turn
            log.warning("referenced skills not loaded", extra={"context": cid, "error": str(exc)})
            return [], unknown, None
        return wanted, unknown, None

    def _record(
        self, st: ContextState, req: TurnRequest, skills: list[SkillRef] | None
    ) -> tuple[dict[str, Any], list[Msg], dict[str, Any]]:
        now = self.contexts.now()
        version = st.version + 1
        seq = st.next_seq
        built = [
            m.assigned(seq + i, m.ts or now, version)
            for i, m in enumerate(_restate(st, req.messages))
        ]
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
            "op": "append",
            "ts": now,
            "msgs": [m.to_dict() for m in built],
        }
        if meta:
            rec["meta"] = meta
        if skills is not None:
            rec["skills"] = [[r.name, r.hash] for r in skills]
        if req.create:
            rec["create"] = True
        if req.idempotency_key:
            rec["idem"] = req.idempotency_key
            rec["res"] = result
        if st.calibration.kept:
            rec["cal"] = st.calibration.to_dict()
        return rec, built, result


def _restate(st: ContextState, messages: Sequence[Msg]) -> list[Msg]:
    """The turn's messages, with an abandoned call restated (an assistant
    message carrying just that call) before its late result, so the result
    follows its call in every slice."""
    if not st.abandoned:
        return list(messages)
    out: list[Msg] = []
    seen: set[str] = set()
    for m in messages:
        if m.kind == ASSISTANT:
            seen.update(c.id for c in m.tool_calls)
        elif m.kind == TOOL and m.call_id not in seen and m.call_id not in st.calls.ids:
            call = st.abandoned.get(m.call_id)
            if call is not None:
                out.append(Msg(ASSISTANT, tool_calls=(call,), ts=m.ts))
                seen.add(call.id)
        out.append(m)
    return out


def _result(
    res: dict[str, Any],
    replayed: bool = False,
    loaded: list[SkillRef] | None = None,
    unknown: list[str] | None = None,
    incarnation: str = "",
) -> TurnResult:
    return TurnResult(
        int(res["version"]),
        int(res["est_tokens"]),
        bool(res["compaction_due"]),
        list(res["message_ids"]),
        replayed,
        list(loaded or ()),
        list(unknown or ()),
        incarnation,
    )
