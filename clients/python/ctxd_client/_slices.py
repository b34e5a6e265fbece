"""Reading a context: the GetContext request of a slice (its provider
format, ``since_version``, ``last_n``, ``at_version``), its pages read to
the end (starting again when a compaction makes a page token stale), and
the pages joined into a :class:`SliceMessages` or a :class:`SliceDelta`."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client._ops import (
    CONTEXT,
    Call,
    Op,
    SliceDelta,
    SliceMessages,
    enum_value,
    format_value,
    has,
    version_of,
)
from ctxd_client.errors import Aborted, CtxdError

#: How often a paged read starts again after a compaction invalidated its page token.
PAGE_RESTARTS = 3

_CHANGE = {
    pb.SLICE_CHANGE_NONE: "none",
    pb.SLICE_CHANGE_APPEND: "append",
    pb.SLICE_CHANGE_REPLACE: "replace",
}


def since(read: pb.GetContextRequest, version: int, incarnation: str | None) -> None:
    """Sets since_version, and since_incarnation from ``incarnation`` or the
    :class:`Version` passed (empty for a plain int: the version alone decides)."""
    read.since_version = version
    inc = getattr(version, "incarnation", "") if incarnation is None else incarnation
    if inc and has(pb.GetContextRequest, "since_incarnation"):
        read.since_incarnation = inc  # type: ignore[attr-defined]


def paged_context(req: pb.GetContextRequest, first: Any = None) -> Generator[Call, Any, list]:
    """All pages of one GetContext read (continuing from ``first`` when the
    first page came some other way, e.g. with a turn); starts again from the
    first page if a page token goes stale. ``since_version`` goes with the
    first page only, with its since_incarnation (later pages of a replacement
    continue from the token)."""
    version = req.since_version if req.HasField("since_version") else None
    incarnation = req.since_incarnation
    for attempt in range(PAGE_RESTARTS + 1):
        pages: list = [] if first is None else [first]
        req.page_token = ""
        if version is not None:
            req.since_version = version
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


def tail(req: pb.GetContextRequest, last_n: int) -> None:
    if last_n:
        if not has(pb.GetContextRequest, "last_n"):
            raise CtxdError("this sidecar's API has no tail read (GetContextRequest.last_n)")
        req.last_n = last_n  # type: ignore[attr-defined]


def as_of(req: pb.GetContextRequest, at_version: int) -> None:
    if at_version:
        if not has(pb.GetContextRequest, "at_version"):
            raise CtxdError("this sidecar's API cannot read earlier versions (at_version)")
        req.at_version = at_version  # type: ignore[attr-defined]


def slice_request(
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
        if not has(pb.GetContextRequest, "without_summary_blocks"):
            raise CtxdError("this sidecar's API cannot leave the summary blocks out")
        req.without_summary_blocks = True  # type: ignore[attr-defined]
    if format != "ctxd":
        value = format_value(format)
        ok = has(pb.GetContextRequest, "format") and has(pb.GetContextResponse, "messages_json")
        if not ok:
            raise CtxdError("this sidecar's API has no provider formats (messages_json)")
        req.format = value  # type: ignore[attr-defined]
        if cache_breakpoint and has(pb.GetContextRequest, "cache_breakpoint"):
            req.cache_breakpoint = True  # type: ignore[attr-defined]
    return req


def slice_pages(req: pb.GetContextRequest, format: str) -> Op:
    incremental = req.HasField("since_version")
    pages = yield from paged_context(req)
    return slice_result(pages, format, incremental=incremental)


def slice_result(pages: list, format: str, *, incremental: bool) -> Any:
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
    version = version_of(pages[0].info)
    if incremental:
        return SliceDelta(_CHANGE.get(pages[0].change, "replace"), version, messages, system)
    out = SliceMessages(messages)
    out.version, out.system = version, system
    return out


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
