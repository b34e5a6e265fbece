"""The verbs of conversations (ContextService): turns in, slices and the
record out, and the contexts themselves. Each is its op builder, made a
client method by ``verb`` (see ``_ops``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Generator, Iterable, Mapping
from typing import Any

from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client._ops import (
    CONTEXT,
    Call,
    Op,
    SliceDelta,
    SliceMessages,
    Truncated,
    Turn,
    Version,
    enum_value,
    format_value,
    has,
    paged_items,
    to_pb,
    verb,
)
from ctxd_client._slices import (
    as_of,
    paged_context,
    since,
    slice_pages,
    slice_request,
    slice_result,
    tail,
)
from ctxd_client._usage import usage_request
from ctxd_client.errors import CtxdError, NotFound


def _turn_request(
    context_id: str,
    idempotency_key: str | None,
    expected_version: int | None,
    principal: str,
    model: str,
    model_window: int,
    task: str,
) -> pb.AppendTurnRequest:
    """An AppendTurnRequest without its messages (see :func:`_add_messages`)."""
    req = pb.AppendTurnRequest(
        context_id=context_id,
        idempotency_key=idempotency_key or uuid.uuid4().hex,
        principal=principal,
        model=model,
        model_window=model_window,
        task=task,
    )
    if expected_version is not None:
        req.expected_version = expected_version
    return req


def _add_messages(
    req: pb.AppendTurnRequest,
    messages: Iterable[Mapping | pb.Message] | str,
    format: str,
    system: str | list | None,
) -> None:
    """The turn's messages: ctxd's, or a provider's as JSON (with ``system``)."""
    if system is not None and format != "anthropic":
        raise CtxdError('system is the Anthropic system argument: use it with format="anthropic"')
    if format == "ctxd":
        req.messages.extend(to_pb(m, pb.Message) for m in messages)
        return
    value = format_value(format)
    if not has(pb.AppendTurnRequest, "messages_json"):
        raise CtxdError("this sidecar's API has no provider formats (messages_json)")
    req.messages_json = messages if isinstance(messages, str) else json.dumps(list(messages))
    req.format = value  # type: ignore[attr-defined]
    if system is not None:
        if not has(pb.AppendTurnRequest, "system_json"):
            raise CtxdError("this sidecar's API has no system_json on AppendTurn")
        req.system_json = json.dumps(system)  # a str or a list of text blocks


def _record_usage(context_id: str, usage: Any, model: str) -> Generator[Call, Any, None]:
    req = usage_request(context_id, usage, model)
    if req.input_tokens <= 0:
        return  # no input count: nothing to calibrate or measure
    try:
        yield Call(CONTEXT, "RecordUsage", req)
    except NotFound:
        pass  # the turn creates the context: nothing to measure against yet


class _TranscriptVerbs:
    """A conversation's transcript: turns appended, slices and the record read."""

    @verb
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
    ) -> Op[pb.AppendTurnResponse]:
        """Appends one turn; retried on UNAVAILABLE under one idempotency key
        (generated when not given), so a retry never appends twice.

        ``format="openai"``/``"anthropic"`` passes provider messages through as
        JSON (``system``: Anthropic's system argument, sent when it is new)."""
        req = _turn_request(
            context_id, idempotency_key, expected_version, principal, model, model_window, task
        )
        _add_messages(req, messages, format, system)
        # Retried on UNAVAILABLE: the idempotency key makes a repeat append nothing.
        return (yield Call(CONTEXT, "AppendTurn", req, retry=True))

    @verb
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
    ) -> Op[Turn]:
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
        # The read rides on the AppendTurn (AppendTurnRequest.read); later pages of a
        # replaced slice come from GetContext, as does the whole read from an older API.
        if usage is not None:
            yield from _record_usage(context_id, usage, str(model or ""))
        req = _turn_request(
            context_id, idempotency_key, expected_version, principal, model, model_window, task
        )
        _add_messages(req, messages, format, system)
        read = slice_request(
            context_id, format, None, page_size, cache_breakpoint, without_summary_blocks
        )
        since(read, since_version, since_incarnation)
        if has(pb.AppendTurnRequest, "read"):
            req.read.CopyFrom(read)  # type: ignore[attr-defined]
        appended = yield Call(CONTEXT, "AppendTurn", req, retry=True)
        if not has(pb.AppendTurnResponse, "read") or not appended.HasField("read"):
            return Turn(appended, (yield from slice_pages(read, format)))
        pages = yield from paged_context(read, first=appended.read)
        return Turn(appended, slice_result(pages, format, incremental=True))

    @verb
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
    ) -> Op[SliceMessages | SliceDelta]:
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
        req = slice_request(
            context_id, format, consistency, page_size, cache_breakpoint, without_summary_blocks
        )
        tail(req, last_n)
        as_of(req, at_version)
        if since_version is not None:
            since(req, since_version, since_incarnation)
        return (yield from slice_pages(req, format))

    @verb
    def get(
        self,
        context_id: str,
        *,
        consistency: int | str | None = None,
        page_size: int = 0,
        last_n: int = 0,
        at_version: int = 0,
        timeout: float | None = None,
    ) -> Op[pb.GetContextResponse]:
        """The whole record (``.context``) and ``.info``; ``last_n``, ``at_version``: as slice."""
        req = pb.GetContextRequest(
            context_id=context_id,
            view=pb.CONTEXT_VIEW_FULL,
            consistency=enum_value(pb.ReadConsistency, "READ_CONSISTENCY_", consistency),
            page_size=page_size,
        )
        tail(req, last_n)
        as_of(req, at_version)
        whole, *more = yield from paged_context(req)
        for page in more:
            whole.context.messages.extend(page.context.messages)
        whole.next_page_token = ""
        return whole

    @verb
    def truncate(
        self,
        context_id: str,
        *,
        count: int = 0,
        after_message_id: str = "",
        expected_version: int | None = None,
        format: str = "ctxd",
        timeout: float | None = None,
    ) -> Op[Truncated]:
        """Remove the last ``count`` live messages (or all after
        ``after_message_id``) in one change, and return them. Not retried:
        pass ``expected_version`` to make a retry safe."""
        req = pb.TruncateContextRequest(
            context_id=context_id, count=count, after_message_id=after_message_id
        )
        if expected_version is not None:
            req.expected_version = expected_version
        if format != "ctxd":
            req.format = format_value(format)
        resp = yield Call(CONTEXT, "TruncateContext", req)
        removed = list(resp.removed) if format == "ctxd" else json.loads(resp.removed_json or "[]")
        return Truncated(Version(resp.version, resp.incarnation), removed)


class _ContextVerbs:
    """The contexts themselves: made, described, listed and deleted."""

    @verb
    def info(
        self, context_id: str, *, consistency: int | str | None = None, timeout: float | None = None
    ) -> Op[pb.ContextInfo]:
        req = pb.GetContextRequest(
            context_id=context_id,
            view=pb.CONTEXT_VIEW_INFO,
            consistency=enum_value(pb.ReadConsistency, "READ_CONSISTENCY_", consistency),
        )
        return (yield Call(CONTEXT, "GetContext", req, retry=True)).info

    @verb
    def list_contexts(
        self,
        *,
        kind: int | str | None = None,
        include_archived: bool = False,
        page_size: int = 0,
        id_prefix: str = "",
        timeout: float | None = None,
    ) -> Op[list[pb.ContextInfo]]:
        """Contexts in id order; ``id_prefix``: only ids starting with it."""
        req = pb.ListContextsRequest(
            kind=enum_value(pb.ContextKind, "CONTEXT_KIND_", kind),
            include_archived=include_archived,
            page_size=page_size,
        )
        if id_prefix:
            if not has(pb.ListContextsRequest, "id_prefix"):
                raise CtxdError("this sidecar's API cannot list by id prefix")
            req.id_prefix = id_prefix  # type: ignore[attr-defined]
        return (yield from paged_items(CONTEXT, "ListContexts", req, "contexts"))

    @verb
    def create_context(
        self,
        context_id: str,
        *,
        principal: str = "",
        model: str = "",
        model_window: int = 0,
        task: str = "",
        timeout: float | None = None,
    ) -> Op[pb.CreateContextResponse]:
        """Make an empty conversation exist (``.created`` False if it did)."""
        req = pb.CreateContextRequest(
            context_id=context_id,
            principal=principal,
            model=model,
            model_window=model_window,
            task=task,
        )
        # Retried on UNAVAILABLE: creating what exists changes nothing.
        return (yield Call(CONTEXT, "CreateContext", req, retry=True))

    @verb
    def delete(
        self, context_id: str, *, expected_version: int | None = None, timeout: float | None = None
    ) -> Op[bool]:
        req = pb.DeleteContextRequest(context_id=context_id)
        if expected_version is not None:
            req.expected_version = expected_version
        return (yield Call(CONTEXT, "DeleteContext", req)).deleted
