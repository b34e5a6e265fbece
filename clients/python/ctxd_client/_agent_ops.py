"""The verbs beyond a context's transcript: compaction, plan, skills, prompt,
usage and agent memory, each its op builder made a client method by
``verb`` (see ``_ops``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client._api.ctxd.v1 import memory_pb2 as mpb
from ctxd_client._ops import CONTEXT, MEMORY, Call, Op, enum_value, paged, paged_items, to_pb, verb
from ctxd_client._usage import usage_request
from ctxd_client.errors import CtxdError

_PLAN_OPS = {
    "create": pb.PlanCreate,
    "update": pb.PlanUpdate,
    "insert": pb.PlanInsert,
    "move": pb.PlanMove,
}


class _CompactionVerbs:
    """Compaction by the sidecar, or by the runtime (plan, then apply)."""

    @verb
    def compact(
        self,
        context_id: str,
        *,
        keep_last: int = 0,
        target_tokens: int = 0,
        instructions: str = "",
        summariser: str = "",
        timeout: float | None = None,
    ) -> Op[pb.CompactResponse]:
        req = pb.CompactRequest(
            context_id=context_id,
            keep_last=keep_last,
            target_tokens=target_tokens,
            instructions=instructions,
            summariser=summariser,
        )
        return (yield Call(CONTEXT, "Compact", req))

    @verb
    def plan_compaction(
        self,
        context_id: str,
        *,
        keep_last: int = 0,
        target_tokens: int = 0,
        timeout: float | None = None,
    ) -> Op[pb.PlanCompactionResponse]:
        req = pb.PlanCompactionRequest(
            context_id=context_id, keep_last=keep_last, target_tokens=target_tokens
        )
        return (yield Call(CONTEXT, "PlanCompaction", req, retry=True))

    @verb
    def apply_compaction(
        self,
        context_id: str,
        plan_ref: str,
        answer: str | Mapping,
        *,
        timeout: float | None = None,
    ) -> Op[pb.ApplyCompactionResponse]:
        """``answer`` is the summariser's JSON (a dict is serialised) or plain text."""
        text = answer if isinstance(answer, str) else json.dumps(answer)
        req = pb.ApplyCompactionRequest(context_id=context_id, plan_ref=plan_ref, answer=text)
        return (yield Call(CONTEXT, "ApplyCompaction", req))

    @verb
    def expand_compaction(
        self,
        context_id: str,
        compaction_id: str,
        *,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> Op[pb.ExpandCompactionResponse]:
        """The messages one compaction folded (all pages) and its record."""
        req = pb.ExpandCompactionRequest(
            context_id=context_id, compaction_id=compaction_id, page_size=page_size
        )
        whole, *more = yield from paged(CONTEXT, "ExpandCompaction", req)
        for page in more:
            whole.messages.extend(page.messages)
        whole.next_page_token = ""
        return whole


class _AgentVerbs:
    """The plan and its runs, the preflight verdict, skills, the prompt, and
    what the provider reported of a call (calibration, the prompt cache)."""

    @verb
    def update_plan(
        self,
        context_id: str,
        *,
        create: Mapping | pb.PlanCreate | None = None,
        update: Mapping | pb.PlanUpdate | None = None,
        insert: Mapping | pb.PlanInsert | None = None,
        move: Mapping | pb.PlanMove | None = None,
        clear: bool = False,
        expected_version: int | None = None,
        timeout: float | None = None,
    ) -> Op[pb.UpdatePlanResponse]:
        """Exactly one plan operation, as a dict in the proto's shape."""
        given = {"create": create, "update": update, "insert": insert, "move": move}
        chosen = [k for k, v in given.items() if v is not None] + (["clear"] if clear else [])
        if len(chosen) != 1:
            raise CtxdError("update_plan takes exactly one of create, update, insert, move, clear")
        req = pb.UpdatePlanRequest(context_id=context_id)
        if clear:
            req.clear.SetInParent()
        else:
            name = chosen[0]
            getattr(req, name).CopyFrom(to_pb(given[name], _PLAN_OPS[name]))
        if expected_version is not None:
            req.expected_version = expected_version
        return (yield Call(CONTEXT, "UpdatePlan", req))

    @verb
    def report_run(
        self,
        context_id: str,
        *,
        kind: int | str,
        id: str,
        outcome: int | str,
        reason: str = "",
        timeout: float | None = None,
    ) -> Op[pb.ReportRunResponse]:
        """``kind`` "run"/"subagent"/"task"; ``outcome`` "succeeded"/"failed"/"cancelled"."""
        req = pb.ReportRunRequest(
            context_id=context_id,
            binding=pb.PlanBinding(kind=enum_value(pb.BindingKind, "BINDING_KIND_", kind), id=id),
            outcome=enum_value(pb.RunOutcome, "RUN_OUTCOME_", outcome),
            reason=reason,
        )
        return (yield Call(CONTEXT, "ReportRun", req))

    @verb
    def set_preflight(
        self,
        context_id: str,
        verdict: str | Mapping,
        *,
        expected_version: int | None = None,
        timeout: float | None = None,
    ) -> Op[int]:
        text = verdict if isinstance(verdict, str) else json.dumps(verdict)
        req = pb.SetPreflightRequest(context_id=context_id, verdict_json=text)
        if expected_version is not None:
            req.expected_version = expected_version
        return (yield Call(CONTEXT, "SetPreflight", req)).version

    @verb
    def list_skills(self, *, timeout: float | None = None) -> Op[list[pb.SkillInfo]]:
        return list((yield Call(CONTEXT, "ListSkills", pb.ListSkillsRequest(), retry=True)).skills)

    @verb
    def load_skill(
        self, context_id: str, name: str, *, timeout: float | None = None
    ) -> Op[pb.LoadSkillResponse]:
        req = pb.LoadSkillRequest(context_id=context_id, name=name)
        return (yield Call(CONTEXT, "LoadSkill", req))

    @verb
    def unload_skill(
        self, context_id: str, name: str, *, timeout: float | None = None
    ) -> Op[pb.UnloadSkillResponse]:
        req = pb.UnloadSkillRequest(context_id=context_id, name=name)
        return (yield Call(CONTEXT, "UnloadSkill", req))

    @verb
    def render_prompt(
        self, context_id: str, *, agent: str = "", timeout: float | None = None
    ) -> Op[pb.RenderPromptResponse]:
        req = pb.RenderPromptRequest(context_id=context_id, agent=agent)
        return (yield Call(CONTEXT, "RenderPrompt", req))

    @verb
    def record_usage(
        self,
        context_id: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str = "",
        cached_input_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        usage: Any = None,
        timeout: float | None = None,
    ) -> Op[pb.RecordUsageResponse]:
        """Report the provider's usage: the counts, or ``usage`` (an OpenAI or
        Anthropic usage, dict or SDK object) to read them from."""
        if usage is not None:
            req = usage_request(context_id, usage, model)
        else:
            req = pb.RecordUsageRequest(
                context_id=context_id,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                model=model,
            )
            if cached_input_tokens is not None:
                req.cached_input_tokens = cached_input_tokens
            if cache_write_tokens is not None:
                req.cache_write_tokens = cache_write_tokens
        return (yield Call(CONTEXT, "RecordUsage", req))


class _MemoryVerbs:
    """The agent's memory: keys, values, vectors and search."""

    @verb
    def memory_get(self, key: str, *, timeout: float | None = None) -> Op[mpb.MemoryRecord]:
        """The live record (NotFound when there is none); ``json.loads(r.value_json)``."""
        return (yield Call(MEMORY, "Get", mpb.GetRequest(key=key), retry=True)).record

    @verb
    def memory_set(
        self,
        key: str,
        value: Any = None,
        *,
        value_json: str | None = None,
        ttl_seconds: int = 0,
        expected_version: str = "",
        create_only: bool = False,
        by: str = "",
        vectors: Mapping[str, Sequence[float]] | None = None,
        embed_fields: Sequence[str] = (),
        timeout: float | None = None,
    ) -> Op[mpb.MemoryRecord]:
        """Stores ``value`` as JSON, or ``value_json`` byte for byte; with
        ``vectors`` (field -> embedding) or ``embed_fields`` (paths the
        sidecar's embedder embeds) for :meth:`memory_search`."""
        if value_json is None:
            value_json = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        req = mpb.SetRequest(
            key=key,
            value_json=value_json,
            ttl_seconds=ttl_seconds,
            expected_version=expected_version,
            create_only=create_only,
            by=by,
            vectors=[mpb.Vector(field=f, values=list(v)) for f, v in (vectors or {}).items()],
            embed_fields=list(embed_fields),
        )
        return (yield Call(MEMORY, "Set", req)).record

    @verb
    def memory_search(
        self,
        prefix: str = "",
        *,
        query: str | Sequence[float],
        filter: Mapping[str, Any] | None = None,  # noqa: A002 - LangGraph's name
        limit: int = 0,
        offset: int = 0,
        include_values: bool = False,
        fields: Sequence[str] = (),
        timeout: float | None = None,
    ) -> Op[list[mpb.SearchHit]]:
        """Records under ``prefix`` most similar to ``query`` (a text the
        sidecar embeds, or a vector), best first, each hit with its score."""
        req = mpb.SearchRequest(
            prefix=prefix,
            filter_json=json.dumps(filter, separators=(",", ":")) if filter else "",
            limit=limit,
            offset=offset,
            include_values=include_values,
            fields=list(fields),
        )
        if isinstance(query, str):
            req.query_text = query
        else:
            req.query_vector.extend(query)
        return list((yield Call(MEMORY, "Search", req, retry=True)).hits)

    @verb
    def memory_delete(
        self, key: str, *, expected_version: str = "", timeout: float | None = None
    ) -> Op[bool]:
        req = mpb.DeleteRequest(key=key, expected_version=expected_version)
        return (yield Call(MEMORY, "Delete", req)).deleted

    @verb
    def memory_list(
        self,
        prefix: str = "",
        *,
        include_values: bool = False,
        limit: int = 0,
        timeout: float | None = None,
    ) -> Op[list[mpb.MemoryRecord]]:
        """Every live record under ``prefix`` (all pages), in key order."""
        req = mpb.ListRequest(prefix=prefix, include_values=include_values, limit=limit)
        return (yield from paged_items(MEMORY, "List", req, "records"))
