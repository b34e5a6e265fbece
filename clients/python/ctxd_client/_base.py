"""The verbs both clients share, written once over ``_run`` (sync in Client,
async in AsyncClient); channel set-up and retry policy are in ``_connect``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ctxd_client import _agent_ops as agent_ops
from ctxd_client import _ops as ops
from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client._api.ctxd.v1 import context_pb2_grpc, memory_pb2_grpc
from ctxd_client._api.ctxd.v1 import memory_pb2 as mpb


class _Verbs:
    """Every RPC as a typed method; subclasses provide ``_run``."""

    _timeout: float | None
    _metadata: tuple

    def _stubs(self, channel) -> dict:
        return {
            ops.CONTEXT: context_pb2_grpc.ContextServiceStub(channel),
            ops.MEMORY: memory_pb2_grpc.MemoryServiceStub(channel),
        }

    def _run(self, op: ops.Op, timeout: float | None) -> Any:  # pragma: no cover
        raise NotImplementedError

    # -- contexts -------------------------------------------------------------------
    def append_turn(
        self,
        context_id: str,
        messages: Iterable[Mapping | pb.Message] | str,
        *,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
        principal: str = "",
        model: str = "",
        model_window: int = 0,
        task: str = "",
        format: str = "ctxd",
        system: str | list | None = None,
        timeout: float | None = None,
    ) -> pb.AppendTurnResponse:
        """Appends one turn; retried on UNAVAILABLE under one idempotency key
        (generated when not given), so a retry never appends twice.

        ``format="openai"``/``"anthropic"`` passes provider messages through as
        JSON (``system``: Anthropic's system argument, sent when it is new)."""
        return self._run(
            ops.append_turn(
                context_id,
                messages,
                idempotency_key=idempotency_key,
                expected_version=expected_version,
                principal=principal,
                model=model,
                model_window=model_window,
                task=task,
                format=format,
                system=system,
            ),
            timeout,
        )

    def turn(
        self,
        context_id: str,
        messages: Iterable[Mapping | pb.Message] | str,
        *,
        since_version: int,
        since_incarnation: str | None = None,
        format: str = "ctxd",
        cache_breakpoint: bool = False,
        page_size: int = 0,
        without_summary_blocks: bool = False,
        idempotency_key: str | None = None,
        expected_version: int | None = None,
        principal: str = "",
        model: str = "",
        model_window: int = 0,
        task: str = "",
        system: str | list | None = None,
        timeout: float | None = None,
    ) -> ops.Turn:
        """A runtime's whole turn in one round trip: appends the turn (as
        :meth:`append_turn`) and reads what changed in the slice since the
        ``since_version`` the caller holds (as :meth:`slice`). ``.appended``
        is the AppendTurnResponse, ``.next`` the SliceDelta: with "append",
        extend what you hold with ``.next.messages`` (your turn as stored,
        ids included); with "replace", hold ``.next.messages`` instead;
        pass ``.next.version`` as the next ``since_version``.

        A runtime that sends :meth:`render_prompt`'s prompt as its system
        prompt passes ``without_summary_blocks=True``: that prompt carries
        the summary and plan, so the slice leaves them out and each request
        holds them once."""
        return self._run(
            ops.turn(
                context_id,
                messages,
                since_version=since_version,
                since_incarnation=since_incarnation,
                format=format,
                cache_breakpoint=cache_breakpoint,
                page_size=page_size,
                without_summary_blocks=without_summary_blocks,
                idempotency_key=idempotency_key,
                expected_version=expected_version,
                principal=principal,
                model=model,
                model_window=model_window,
                task=task,
                system=system,
            ),
            timeout,
        )

    def slice(
        self,
        context_id: str,
        *,
        since_version: int | None = None,
        since_incarnation: str | None = None,
        format: str = "ctxd",
        consistency: int | str | None = None,
        page_size: int = 0,
        cache_breakpoint: bool = False,
        without_summary_blocks: bool = False,
        last_n: int = 0,
        timeout: float | None = None,
    ) -> ops.SliceMessages | ops.SliceDelta:
        """The slice to send to a model, every page; with ``since_version``
        a SliceDelta saying whether to append or replace what the caller holds.

        Pass the ``.version`` a slice or turn returned: it carries the
        conversation's incarnation, so one deleted and created again since
        is answered "replace". A plain int compares the version alone, unless
        ``since_incarnation`` (``ContextInfo.incarnation``,
        ``AppendTurnResponse.incarnation``) goes with it.

        With a provider ``format`` the messages are that provider's dicts (pages
        joined as the API says) and ``.system`` Anthropic's system blocks;
        ``"openai_responses"`` gives Responses input items, those added in
        that format exactly as added. ``last_n``: only the last N messages
        (the summary and plan blocks still lead)."""
        return self._run(
            ops.slice_(
                context_id,
                since_version=since_version,
                since_incarnation=since_incarnation,
                format=format,
                consistency=consistency,
                page_size=page_size,
                cache_breakpoint=cache_breakpoint,
                without_summary_blocks=without_summary_blocks,
                last_n=last_n,
            ),
            timeout,
        )

    def get(
        self,
        context_id: str,
        *,
        consistency: int | str | None = None,
        page_size: int = 0,
        last_n: int = 0,
        timeout: float | None = None,
    ) -> pb.GetContextResponse:
        """The whole record (``.context``, all messages; the last ``last_n``
        when given) and ``.info``."""
        return self._run(
            ops.get(context_id, consistency=consistency, page_size=page_size, last_n=last_n),
            timeout,
        )

    def info(
        self, context_id: str, *, consistency: int | str | None = None, timeout: float | None = None
    ) -> pb.ContextInfo:
        return self._run(ops.info(context_id, consistency=consistency), timeout)

    def list_contexts(
        self,
        *,
        kind: int | str | None = None,
        include_archived: bool = False,
        page_size: int = 0,
        id_prefix: str = "",
        timeout: float | None = None,
    ) -> list[pb.ContextInfo]:
        """Contexts in id order; ``id_prefix``: only ids starting with it."""
        return self._run(
            ops.list_contexts(
                kind=kind,
                include_archived=include_archived,
                page_size=page_size,
                id_prefix=id_prefix,
            ),
            timeout,
        )

    def truncate(
        self,
        context_id: str,
        *,
        count: int = 0,
        after_message_id: str = "",
        expected_version: int | None = None,
        format: str = "ctxd",
        timeout: float | None = None,
    ) -> ops.Truncated:
        """Remove the last ``count`` live messages (or all after
        ``after_message_id``) in one change, and return them. Not retried:
        pass ``expected_version`` to make a retry safe."""
        return self._run(
            ops.truncate(
                context_id,
                count=count,
                after_message_id=after_message_id,
                expected_version=expected_version,
                format=format,
            ),
            timeout,
        )

    def create_context(
        self,
        context_id: str,
        *,
        principal: str = "",
        model: str = "",
        model_window: int = 0,
        task: str = "",
        timeout: float | None = None,
    ) -> pb.CreateContextResponse:
        """Make an empty conversation exist (``.created`` False if it did)."""
        return self._run(
            ops.create_context(
                context_id, principal=principal, model=model, model_window=model_window, task=task
            ),
            timeout,
        )

    def delete(
        self, context_id: str, *, expected_version: int | None = None, timeout: float | None = None
    ) -> bool:
        return self._run(ops.delete(context_id, expected_version=expected_version), timeout)

    def compact(
        self,
        context_id: str,
        *,
        keep_last: int = 0,
        target_tokens: int = 0,
        instructions: str = "",
        summariser: str = "",
        timeout: float | None = None,
    ) -> pb.CompactResponse:
        return self._run(
            agent_ops.compact(
                context_id,
                keep_last=keep_last,
                target_tokens=target_tokens,
                instructions=instructions,
                summariser=summariser,
            ),
            timeout,
        )

    def plan_compaction(
        self,
        context_id: str,
        *,
        keep_last: int = 0,
        target_tokens: int = 0,
        timeout: float | None = None,
    ) -> pb.PlanCompactionResponse:
        return self._run(
            agent_ops.plan_compaction(context_id, keep_last=keep_last, target_tokens=target_tokens),
            timeout,
        )

    def apply_compaction(
        self,
        context_id: str,
        plan_ref: str,
        answer: str | Mapping,
        *,
        timeout: float | None = None,
    ) -> pb.ApplyCompactionResponse:
        """``answer`` is the summariser's JSON (a dict is serialised) or plain text."""
        return self._run(agent_ops.apply_compaction(context_id, plan_ref, answer), timeout)

    def expand_compaction(
        self,
        context_id: str,
        compaction_id: str,
        *,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> pb.ExpandCompactionResponse:
        """The messages one compaction folded (all pages) and its record."""
        return self._run(
            agent_ops.expand_compaction(context_id, compaction_id, page_size=page_size), timeout
        )

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
    ) -> pb.UpdatePlanResponse:
        """Exactly one plan operation, as a dict in the proto's shape."""
        return self._run(
            agent_ops.update_plan(
                context_id,
                create=create,
                update=update,
                insert=insert,
                move=move,
                clear=clear,
                expected_version=expected_version,
            ),
            timeout,
        )

    def report_run(
        self,
        context_id: str,
        *,
        kind: int | str,
        id: str,
        outcome: int | str,
        reason: str = "",
        timeout: float | None = None,
    ) -> pb.ReportRunResponse:
        """``kind`` "run"/"subagent"/"task"; ``outcome`` "succeeded"/"failed"/"cancelled"."""
        return self._run(
            agent_ops.report_run(context_id, kind=kind, id=id, outcome=outcome, reason=reason),
            timeout,
        )

    def set_preflight(
        self,
        context_id: str,
        verdict: str | Mapping,
        *,
        expected_version: int | None = None,
        timeout: float | None = None,
    ) -> int:
        return self._run(
            agent_ops.set_preflight(context_id, verdict, expected_version=expected_version), timeout
        )

    def list_skills(self, *, timeout: float | None = None) -> list[pb.SkillInfo]:
        return self._run(agent_ops.list_skills(), timeout)

    def load_skill(
        self, context_id: str, name: str, *, timeout: float | None = None
    ) -> pb.LoadSkillResponse:
        return self._run(agent_ops.load_skill(context_id, name), timeout)

    def unload_skill(
        self, context_id: str, name: str, *, timeout: float | None = None
    ) -> pb.UnloadSkillResponse:
        return self._run(agent_ops.unload_skill(context_id, name), timeout)

    def render_prompt(
        self, context_id: str, *, agent: str = "", timeout: float | None = None
    ) -> pb.RenderPromptResponse:
        return self._run(agent_ops.render_prompt(context_id, agent=agent), timeout)

    def record_usage(
        self,
        context_id: str,
        *,
        input_tokens: int,
        output_tokens: int = 0,
        model: str = "",
        timeout: float | None = None,
    ) -> pb.RecordUsageResponse:
        return self._run(
            agent_ops.record_usage(
                context_id, input_tokens=input_tokens, output_tokens=output_tokens, model=model
            ),
            timeout,
        )

    # -- memory ---------------------------------------------------------------------
    def memory_get(self, key: str, *, timeout: float | None = None) -> mpb.MemoryRecord:
        """The live record (NotFound when there is none); ``json.loads(r.value_json)``."""
        return self._run(agent_ops.memory_get(key), timeout)

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
        timeout: float | None = None,
    ) -> mpb.MemoryRecord:
        """Stores ``value`` as JSON, or ``value_json`` byte for byte."""
        return self._run(
            agent_ops.memory_set(
                key,
                value,
                value_json=value_json,
                ttl_seconds=ttl_seconds,
                expected_version=expected_version,
                create_only=create_only,
                by=by,
            ),
            timeout,
        )

    def memory_delete(
        self, key: str, *, expected_version: str = "", timeout: float | None = None
    ) -> bool:
        return self._run(agent_ops.memory_delete(key, expected_version=expected_version), timeout)

    def memory_list(
        self,
        prefix: str = "",
        *,
        include_values: bool = False,
        limit: int = 0,
        timeout: float | None = None,
    ) -> list[mpb.MemoryRecord]:
        """Every live record under ``prefix`` (all pages), in key order."""
        return self._run(
            agent_ops.memory_list(prefix, include_values=include_values, limit=limit), timeout
        )
