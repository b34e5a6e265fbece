"""Each verb once, as a generator that yields calls and receives replies.

The sync and the async client drive the same generators, so paging, request
building and feature checks are written once for both.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message as PbMessage

from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client._usage import usage_request
from ctxd_client.errors import Aborted, CtxdError, NotFound

CONTEXT = "ctxd.v1.ContextService"
MEMORY = "ctxd.v1.MemoryService"
#: How often a paged read starts again after a compaction invalidated its page token.
PAGE_RESTARTS = 3


@dataclass(frozen=True)
class Call:
    """One unary call: which method, what request, whether it may be retried."""

    service: str
    method: str
    request: PbMessage
    retry: bool = False


Op = Generator[Call, Any, Any]


class Version(int):
    """A context version that knows its incarnation (ContextInfo.incarnation).

    A conversation deleted and created again starts its versions over, so
    the number alone may name a point of the old transcript. Passed back as
    ``since_version``, the incarnation rides along and a re-created
    conversation is answered "replace". Otherwise an ordinary int.
    """

    incarnation: str

    def __new__(cls, value: int, incarnation: str = "") -> Version:
        self = super().__new__(cls, value)
        self.incarnation = incarnation
        return self

    def __reduce__(self):  # copy and pickle keep the incarnation
        return (Version, (int(self), self.incarnation))


def _since(read: pb.GetContextRequest, version: int, incarnation: str | None) -> None:
    """Sets since_version, and since_incarnation from ``incarnation`` or the
    :class:`Version` passed (empty for a plain int: the version alone decides)."""
    read.since_version = version
    inc = getattr(version, "incarnation", "") if incarnation is None else incarnation
    if inc and _has(pb.GetContextRequest, "since_incarnation"):
        read.since_incarnation = inc  # type: ignore[attr-defined]


def _version_of(info: Any) -> Version:
    return Version(info.version, getattr(info, "incarnation", ""))


class SliceMessages(list):
    """The whole slice: a list of messages, with the version it reflects
    (a :class:`Version`: pass it back as ``since_version``).

    ``system`` is the provider's separate system prompt (format "anthropic");
    None otherwise.
    """

    version: int = 0
    system: Any = None


@dataclass
class SliceDelta:
    """An incremental read: ``change`` is "none", "append" or "replace";
    ``version`` a :class:`Version` to pass back as ``since_version``."""

    change: str
    version: int
    messages: list = field(default_factory=list)
    system: Any = None


_FORMATS = ("ctxd", "openai", "anthropic", "openai_responses")
_CHANGE = {
    pb.SLICE_CHANGE_NONE: "none",
    pb.SLICE_CHANGE_APPEND: "append",
    pb.SLICE_CHANGE_REPLACE: "replace",
}


def enum_value(enum_type, prefix: str, value: int | str | None) -> int:
    """Accepts 2, "CONTEXT_KIND_ROOT" or "root" for an enum field."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    name = value if value.upper().startswith(prefix) else f"{prefix}{value}"
    try:
        return enum_type.Value(name.upper())
    except ValueError:
        raise CtxdError(f"unknown {prefix.lower().rstrip('_')} {value!r}") from None


def to_pb(value: Mapping | PbMessage, cls: type[PbMessage]) -> Any:
    """A generated message from a dict in ctxd's shape (proto field names)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, PbMessage):
        raise CtxdError(f"expected {cls.DESCRIPTOR.name}, got {type(value).__name__}")
    try:
        return json_format.ParseDict(dict(value), cls())
    except json_format.ParseError as exc:
        raise CtxdError(f"not a {cls.DESCRIPTOR.name}: {exc}") from None


def to_dict(message: PbMessage) -> dict:
    """A generated message as a dict in ctxd's shape (the inverse of to_pb)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _has(cls: type[PbMessage], name: str) -> bool:
    return name in cls.DESCRIPTOR.fields_by_name


def _format_value(fmt: str) -> int:
    if fmt not in _FORMATS:
        raise CtxdError(f"format must be one of {', '.join(_FORMATS)}, not {fmt!r}")
    enum = getattr(pb, "MessageFormat", None)
    if enum is None:
        raise CtxdError("this sidecar's API has no provider formats (MessageFormat)")
    return enum.Value(f"MESSAGE_FORMAT_{fmt.upper()}")


def _turn_request(
    context_id: str,
    messages: Iterable[Mapping | PbMessage] | str,
    *,
    idempotency_key: str | None = None,
    expected_version: int | None = None,
    principal: str = "",
    model: str = "",
    model_window: int = 0,
    task: str = "",
    format: str = "ctxd",
    system: str | list | None = None,
) -> pb.AppendTurnRequest:
    """An AppendTurnRequest (the keyword arguments of ``Client.append_turn``)."""
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
    if system is not None and format != "anthropic":
        raise CtxdError('system is the Anthropic system argument: use it with format="anthropic"')
    if format == "ctxd":
        req.messages.extend(to_pb(m, pb.Message) for m in messages)
    else:
        value = _format_value(format)
        if not _has(pb.AppendTurnRequest, "messages_json"):
            raise CtxdError("this sidecar's API has no provider formats (messages_json)")
        req.messages_json = messages if isinstance(messages, str) else json.dumps(list(messages))
        req.format = value  # type: ignore[attr-defined]
        if system is not None:
            if not _has(pb.AppendTurnRequest, "system_json"):
                raise CtxdError("this sidecar's API has no system_json on AppendTurn")
            req.system_json = json.dumps(system)  # a str or a list of text blocks
    return req


def append_turn(context_id: str, messages: Iterable[Mapping | PbMessage] | str, **options) -> Op:
    req = _turn_request(context_id, messages, **options)
    # Retried on UNAVAILABLE: the idempotency key makes a repeat append nothing.
    return (yield Call(CONTEXT, "AppendTurn", req, retry=True))


@dataclass
class Turn:
    """A whole turn in one call: what AppendTurn answered (``appended``) and
    what changed in the slice since the version the caller held (``next``)."""

    appended: Any
    next: SliceDelta


def turn(
    context_id: str,
    messages: Iterable[Mapping | PbMessage] | str,
    *,
    since_version: int,
    since_incarnation: str | None = None,
    format: str = "ctxd",
    cache_breakpoint: bool = False,
    page_size: int = 0,
    without_summary_blocks: bool = False,
    usage: Any = None,
    **options,
) -> Op:
    """AppendTurn with the slice read in the same call (AppendTurnRequest.read);
    later pages of a replaced slice come from GetContext. A sidecar that does
    not answer the read (an older API) gets the GetContext read instead.
    ``usage``: the provider's response usage for the call this turn answers
    (OpenAI or Anthropic shape), recorded first (RecordUsage), so it is
    measured against the context the call was made with.
    ``options`` are those of :func:`append_turn`."""
    if usage is not None:
        yield from _record_usage(context_id, usage, str(options.get("model") or ""))
    req = _turn_request(context_id, messages, format=format, **options)
    read = _slice_request(
        context_id, format, None, page_size, cache_breakpoint, without_summary_blocks
    )
    _since(read, since_version, since_incarnation)
    if _has(pb.AppendTurnRequest, "read"):
        req.read.CopyFrom(read)  # type: ignore[attr-defined]
    appended = yield Call(CONTEXT, "AppendTurn", req, retry=True)
    if not _has(pb.AppendTurnResponse, "read") or not appended.HasField("read"):
        return Turn(appended, (yield from _slice_pages(read, format)))
    pages = yield from _paged_context(read, first=appended.read)
    return Turn(appended, _slice_result(pages, format, incremental=True))


def _record_usage(context_id: str, usage: Any, model: str) -> Generator[Call, Any, None]:
    req = usage_request(context_id, usage, model)
    if req.input_tokens <= 0:
        return  # no input count: nothing to calibrate or measure
    try:
        yield Call(CONTEXT, "RecordUsage", req)
    except NotFound:
        pass  # the turn creates the context: nothing to measure against yet


def _paged_context(req: pb.GetContextRequest, first: Any = None) -> Generator[Call, Any, list]:
    """All pages of one GetContext read (continuing from ``first`` when the
    first page came some other way, e.g. with a turn); starts again from the
    first page if a page token goes stale. ``since_version`` goes with the
    first page only, with its since_incarnation (later pages of a replacement
    continue from the token)."""
    since = req.since_version if req.HasField("since_version") else None
    incarnation = req.since_incarnation
    for attempt in range(PAGE_RESTARTS + 1):
        pages: list = [] if first is None else [first]
        req.page_token = ""
        if since is not None:
            req.since_version = since
            if incarnation:
                req.since_incarnation = incarnation  # type: ignore[attr-defined]
        try:
            if not pages:
                pages.append((yield Call(CONTEXT, "GetContext", req, retry=True)))
            while pages[-1].next_page_token:
                req.page_token = pages[-1].next_page_token
                req.ClearField("since_version")
                if incarnation:
                    req.ClearField("since_incarnation")
                pages.append((yield Call(CONTEXT, "GetContext", req, retry=True)))
            return pages
        except Aborted:
            if not pages or attempt == PAGE_RESTARTS:
                raise
            first = None
    raise AssertionError("unreachable")


def _last_n(req: pb.GetContextRequest, last_n: int) -> None:
    if last_n:
        if not _has(pb.GetContextRequest, "last_n"):
            raise CtxdError("this sidecar's API has no tail read (GetContextRequest.last_n)")
        req.last_n = last_n  # type: ignore[attr-defined]


def _at(req: pb.GetContextRequest, at_version: int) -> None:
    if at_version:
        if not _has(pb.GetContextRequest, "at_version"):
            raise CtxdError("this sidecar's API cannot read earlier versions (at_version)")
        req.at_version = at_version  # type: ignore[attr-defined]


def get(
    context_id: str,
    *,
    consistency: int | str | None = None,
    page_size: int = 0,
    last_n: int = 0,
    at_version: int = 0,
) -> Generator[Call, Any, pb.GetContextResponse]:
    req = pb.GetContextRequest(
        context_id=context_id,
        view=pb.CONTEXT_VIEW_FULL,
        consistency=enum_value(pb.ReadConsistency, "READ_CONSISTENCY_", consistency),
        page_size=page_size,
    )
    _last_n(req, last_n)
    _at(req, at_version)
    pages = yield from _paged_context(req)
    whole = pages[0]
    for page in pages[1:]:
        whole.context.messages.extend(page.context.messages)
    whole.next_page_token = ""
    return whole


def info(context_id: str, *, consistency: int | str | None = None) -> Op:
    req = pb.GetContextRequest(
        context_id=context_id,
        view=pb.CONTEXT_VIEW_INFO,
        consistency=enum_value(pb.ReadConsistency, "READ_CONSISTENCY_", consistency),
    )
    return (yield Call(CONTEXT, "GetContext", req, retry=True)).info


def _slice_request(
    context_id: str,
    format: str,
    consistency: int | str | None,
    page_size: int,
    cache_breakpoint: bool,
    without_summary_blocks: bool = False,
) -> pb.GetContextRequest:
    req = pb.GetContextRequest(
        context_id=context_id,
        view=pb.CONTEXT_VIEW_SLICE,
        consistency=enum_value(pb.ReadConsistency, "READ_CONSISTENCY_", consistency),
        page_size=page_size,
    )
    if without_summary_blocks:
        # The runtime sends RenderPrompt's prompt, whose tail has the summary and plan.
        if not _has(pb.GetContextRequest, "without_summary_blocks"):
            raise CtxdError("this sidecar's API cannot leave the summary blocks out")
        req.without_summary_blocks = True  # type: ignore[attr-defined]
    if format != "ctxd":
        value = _format_value(format)
        has = _has(pb.GetContextRequest, "format") and _has(pb.GetContextResponse, "messages_json")
        if not has:
            raise CtxdError("this sidecar's API has no provider formats (messages_json)")
        req.format = value  # type: ignore[attr-defined]
        if cache_breakpoint and _has(pb.GetContextRequest, "cache_breakpoint"):
            req.cache_breakpoint = True  # type: ignore[attr-defined]
    return req


def _slice_pages(req: pb.GetContextRequest, format: str) -> Op:
    incremental = req.HasField("since_version")
    pages = yield from _paged_context(req)
    return _slice_result(pages, format, incremental=incremental)


def _slice_result(pages: list, format: str, *, incremental: bool) -> Any:
    """The pages of one slice read joined: a SliceDelta for an incremental read."""
    messages: list = []
    system = None
    for page in pages:
        if format == "ctxd":
            messages.extend(page.slice)
        else:
            _join(format, messages, json.loads(page.messages_json or "[]"))
            if page.system_json:
                blocks = _blocks(json.loads(page.system_json))
                system = blocks if system is None else system + blocks
    version = _version_of(pages[0].info)
    if incremental:
        return SliceDelta(_CHANGE.get(pages[0].change, "replace"), version, messages, system)
    out = SliceMessages(messages)
    out.version, out.system = version, system
    return out


def slice_(
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
) -> Op:
    req = _slice_request(
        context_id, format, consistency, page_size, cache_breakpoint, without_summary_blocks
    )
    _last_n(req, last_n)
    _at(req, at_version)
    if since_version is not None:
        _since(req, since_version, since_incarnation)
    return (yield from _slice_pages(req, format))


def _blocks(content: Any) -> list:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _join(format: str, held: list, page: list) -> None:
    """Appends a page of provider messages; an Anthropic user message that
    continues a user message across a page boundary is merged into it."""
    if format == "anthropic" and held and page:
        last, first = held[-1], page[0]
        if last.get("role") == first.get("role") == "user":
            held[-1] = {**last, "content": _blocks(last["content"]) + _blocks(first["content"])}
            page = page[1:]
    held.extend(page)


def list_contexts(
    *,
    kind: int | str | None = None,
    include_archived: bool = False,
    page_size: int = 0,
    id_prefix: str = "",
) -> Op:
    req = pb.ListContextsRequest(
        kind=enum_value(pb.ContextKind, "CONTEXT_KIND_", kind),
        include_archived=include_archived,
        page_size=page_size,
    )
    if id_prefix:
        if not _has(pb.ListContextsRequest, "id_prefix"):
            raise CtxdError("this sidecar's API cannot list by id prefix")
        req.id_prefix = id_prefix  # type: ignore[attr-defined]
    out: list = []
    while True:
        resp = yield Call(CONTEXT, "ListContexts", req, retry=True)
        out.extend(resp.contexts)
        if not resp.next_page_token:
            return out
        req.page_token = resp.next_page_token


@dataclass
class Truncated:
    """What TruncateContext removed: ``removed`` (messages, oldest first; the
    provider's dicts with a ``format``), and the ``version`` after it."""

    version: int
    removed: list


def truncate(
    context_id: str,
    *,
    count: int = 0,
    after_message_id: str = "",
    expected_version: int | None = None,
    format: str = "ctxd",
) -> Op:
    req = pb.TruncateContextRequest(
        context_id=context_id, count=count, after_message_id=after_message_id
    )
    if expected_version is not None:
        req.expected_version = expected_version
    if format != "ctxd":
        req.format = _format_value(format)
    resp = yield Call(CONTEXT, "TruncateContext", req)
    removed = list(resp.removed) if format == "ctxd" else json.loads(resp.removed_json or "[]")
    return Truncated(Version(resp.version, resp.incarnation), removed)


def create_context(
    context_id: str,
    *,
    principal: str = "",
    model: str = "",
    model_window: int = 0,
    task: str = "",
) -> Op:
    req = pb.CreateContextRequest(
        context_id=context_id,
        principal=principal,
        model=model,
        model_window=model_window,
        task=task,
    )
    # Retried on UNAVAILABLE: creating what exists changes nothing.
    return (yield Call(CONTEXT, "CreateContext", req, retry=True))


def delete(context_id: str, *, expected_version: int | None = None) -> Op:
    req = pb.DeleteContextRequest(context_id=context_id)
    if expected_version is not None:
        req.expected_version = expected_version
    return (yield Call(CONTEXT, "DeleteContext", req)).deleted
