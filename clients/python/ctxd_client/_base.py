"""The verbs both clients share, written once over ``_run`` (sync in Client,
async in AsyncClient); channel set-up and retry policy are in ``_connect``.

A verb is its typed, documented signature, for callers and their editors;
what it does is its op builder's (``_ops``, ``_agent_ops``), which takes the
same arguments (tests/clients/test_python_verbs.py holds them to it)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from ctxd_client import _agent_ops as agent_ops
from ctxd_client import _history_ops as history_ops
from ctxd_client import _ops as ops
from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client._api.ctxd.v1 import context_pb2_grpc, memory_pb2_grpc
from ctxd_client._api.ctxd.v1 import memory_pb2 as mpb

Signature = TypeVar("Signature", bound=Callable[..., Any])


def _verb(build: Callable[..., ops.Op]) -> Callable[[Signature], Signature]:
    """The method ``signature`` declares, run as ``build``'s op with the
    same arguments; ``timeout`` is the client's."""

    def declare(signature: Signature) -> Signature:
        @functools.wraps(signature)
        def run(self: _Verbs, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
            return self._run(build(*args, **kwargs), timeout)

        run.build = build  # type: ignore[attr-defined]
        return run  # type: ignore[return-value]

    return declare


class _HistoryVerbs:
    """A context's versions and forks (see docs/history.md)."""

    @_verb(history_ops.versions)
    def versions(
        self, context_id: str, *, page_size: int = 0, timeout: float | None = None
    ) -> list[pb.VersionInfo]:
        """The versions still readable with ``at_version``, newest first:
        what each change was, when, and the size after it."""

    @_verb(history_ops.fork)
    def fork(
        self,
        source_id: str,
        context_id: str,
        *,
        at_version: int = 0,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> pb.ContextInfo:
        """A new conversation ``context_id`` holding ``source_id`` as of
        ``at_version`` (0: the latest), independent afterwards. Retried
        safely (one idempotency key for every attempt)."""


class _UsageVerbs:
    """What the provider reported of a call (calibration, the prompt cache)."""

    @_verb(agent_ops.record_usage)
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
    ) -> pb.RecordUsageResponse:
        """Report the provider's usage: the counts, or ``usage`` (an OpenAI or
        Anthropic usage, dict or SDK object) to read them from."""


class _MemoryVerbs:
    """The agent's memory: keys, values, vectors and search."""

    @_verb(agent_ops.memory_get)
    def memory_get(self, key: str, *, timeout: float | None = None) -> mpb.MemoryRecord:
        """The live record (NotFound when there is none); ``json.loads(r.value_json)``."""

    @_verb(agent_ops.memory_set)
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
    ) -> mpb.MemoryRecord:
        """Stores ``value`` as JSON, or ``value_json`` byte for byte; with
        ``vectors`` (field -> embedding) or ``embed_fields`` (paths the
        sidecar's embedder embeds) for :meth:`memory_search`."""

    @_verb(agent_ops.memory_search)
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
    ) -> list[mpb.SearchHit]:
        """Records under ``prefix`` most similar to ``query`` (a text the
        sidecar embeds, or a vector), best first, each hit with its score."""

    @_verb(agent_ops.memory_delete)
    def memory_delete(
        self, key: str, *, expected_version: str = "", timeout: float | None = None
    ) -> bool: ...

    @_verb(agent_ops.memory_list)
    def memory_list(
        self,
        prefix: str = "",
        *,
        include_values: bool = False,
        limit: int = 0,
        timeout: float | None = None,
    ) -> list[mpb.MemoryRecord]:
        """Every live record under ``prefix`` (all pages), in key order."""


class _Verbs(_HistoryVerbs, _UsageVerbs, _MemoryVerbs):
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
    @_verb(ops.append_turn)
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

    @_verb(ops.turn)
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
        usage: Any = None,
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
        holds them once.

        ``usage``: the provider's response usage for the call this turn
        answers (an OpenAI ``usage`` or Anthropic ``usage``, dict or SDK
        object): recorded first (RecordUsage with its cached and cache-write
        token counts), so the context's calibration and prompt-cache figures
        follow each call without a call of their own."""

    @_verb(ops.slice_)
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
        at_version: int = 0,
        timeout: float | None = None,
    ) -> ops.SliceMessages | ops.SliceDelta:
        """The slice to send to a model, every page; with ``since_version``
        a SliceDelta saying whether to append or replace what the caller holds.

        Pass the ``.version`` a slice or turn returned: it carries the
        conversation's incarnation, so one deleted and created again since
        is answered "replace". A plain int compares the version alone, unless ``since_incarnation``
        (``ContextInfo.incarnation``, ``AppendTurnResponse.incarnation``) goes with it.

        With a provider ``format`` the messages are that provider's dicts (pages
        joined as the API says) and ``.system`` Anthropic's system blocks;
        ``"openai_responses"`` gives Responses input items, those added in that format
        exactly as added. ``last_n``: only the last N messages (the summary and plan
        blocks still lead); ``at_version``: the slice as it was at that version."""

    @_verb(ops.get)
    def get(
        self,
        context_id: str,
        *,
        consistency: int | str | None = None,
        page_size: int = 0,
        last_n: int = 0,
        at_version: int = 0,
        timeout: float | None = None,
    ) -> pb.GetContextResponse:
        """The whole record (``.context``) and ``.info``; ``last_n``, ``at_version``: as slice."""

    @_verb(ops.info)
    def info(
        self, context_id: str, *, consistency: int | str | None = None, timeout: float | None = None
    ) -> pb.ContextInfo: ...

    @_verb(ops.list_contexts)
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

    @_verb(ops.truncate)
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

    @_verb(ops.create_context)
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

    @_verb(ops.delete)
    def delete(
        self, context_id: str, *, expected_version: int | None = None, timeout: float | None = None
    ) -> bool: ...

    @_verb(agent_ops.compact)
    def compact(
        self,
        context_id: str,
        *,
        keep_last: int = 0,
        target_tokens: int = 0,
        instructions: str = "",
        summariser: str = "",
        timeout: float | None = None,
    ) -> pb.CompactResponse: ...

    @_verb(agent_ops.plan_compaction)
    def plan_compaction(
        self,
        context_id: str,
        *,
        keep_last: int = 0,
        target_tokens: int = 0,
        timeout: float | None = None,
    ) -> pb.PlanCompactionResponse: ...

    @_verb(agent_ops.apply_compaction)
    def apply_compaction(
        self,
        context_id: str,
        plan_ref: str,
        answer: str | Mapping,
        *,
        timeout: float | None = None,
    ) -> pb.ApplyCompactionResponse:
        """``answer`` is the summariser's JSON (a dict is serialised) or plain text."""

    @_verb(agent_ops.expand_compaction)
    def expand_compaction(
        self,
        context_id: str,
        compaction_id: str,
        *,
        page_size: int = 0,
        timeout: float | None = None,
    ) -> pb.ExpandCompactionResponse:
        """The messages one compaction folded (all pages) and its record."""

    @_verb(agent_ops.update_plan)
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

    @_verb(agent_ops.report_run)
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

    @_verb(agent_ops.set_preflight)
    def set_preflight(
        self,
        context_id: str,
        verdict: str | Mapping,
        *,
        expected_version: int | None = None,
        timeout: float | None = None,
    ) -> int: ...

    @_verb(agent_ops.list_skills)
    def list_skills(self, *, timeout: float | None = None) -> list[pb.SkillInfo]: ...

    @_verb(agent_ops.load_skill)
    def load_skill(
        self, context_id: str, name: str, *, timeout: float | None = None
    ) -> pb.LoadSkillResponse: ...

    @_verb(agent_ops.unload_skill)
    def unload_skill(
        self, context_id: str, name: str, *, timeout: float | None = None
    ) -> pb.UnloadSkillResponse: ...

    @_verb(agent_ops.render_prompt)
    def render_prompt(
        self, context_id: str, *, agent: str = "", timeout: float | None = None
    ) -> pb.RenderPromptResponse: ...
