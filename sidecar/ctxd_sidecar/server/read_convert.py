"""GetContextRequest ↔ :class:`~ctxd_sidecar.core.contexts.reads.ReadRequest`,
and a :class:`~ctxd_sidecar.core.contexts.reads.Reply` as a GetContextResponse.

Conversion only: which fields go together, and which pager answers, is
decided in :mod:`ctxd_sidecar.core.contexts.reads`.
"""

from __future__ import annotations

from collections.abc import Callable

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core import providers
from ctxd_sidecar.core.contexts import reads, views
from ctxd_sidecar.core.contexts.archive import CompactionInfo
from ctxd_sidecar.core.contexts.model import ContextState
from ctxd_sidecar.server import wire
from ctxd_sidecar.server.context_convert import (
    FORMAT_FROM_PB,
    context_meta_pb,
    info_to_pb,
    known,
    record_pb,
    slice_blocks_pb,
    slice_json,
)

_VIEWS = {
    pb.CONTEXT_VIEW_UNSPECIFIED: views.FULL,
    pb.CONTEXT_VIEW_FULL: views.FULL,
    pb.CONTEXT_VIEW_SLICE: views.SLICE,
    pb.CONTEXT_VIEW_INFO: reads.INFO,
}
_CONSISTENCY = {
    pb.READ_CONSISTENCY_UNSPECIFIED: "",
    pb.READ_CONSISTENCY_LATEST: reads.LATEST,
    pb.READ_CONSISTENCY_CACHED: reads.CACHED,
}
_CHANGE = {
    "": pb.SLICE_CHANGE_UNSPECIFIED,
    views.NONE: pb.SLICE_CHANGE_NONE,
    views.APPEND: pb.SLICE_CHANGE_APPEND,
    views.REPLACE: pb.SLICE_CHANGE_REPLACE,
}


def read_request(request: pb.GetContextRequest, prefix: str = "") -> reads.ReadRequest:
    """``request`` in domain terms, refused with the field named (``prefix``:
    ``read.`` inside an AppendTurnRequest)."""
    return reads.ReadRequest(
        context_id=request.context_id,
        view=known(_VIEWS, request.view, f"{prefix}view", "view"),
        consistency=known(_CONSISTENCY, request.consistency, f"{prefix}consistency", "consistency"),
        since=request.since_version if request.HasField("since_version") else None,
        incarnation=request.since_incarnation,
        page_size=request.page_size,
        page_token=request.page_token,
        fmt=known(FORMAT_FROM_PB, request.format, f"{prefix}format", "message format"),
        last_n=request.last_n,
        cache_breakpoint=request.cache_breakpoint,
        blocks=not request.without_summary_blocks,
        at_version=request.at_version,
        prefix=prefix,
    )


def turn_read(request: pb.AppendTurnRequest) -> reads.ReadRequest | None:
    """AppendTurnRequest.read, checked before the turn is appended (None: not sent)."""
    if not request.HasField("read"):
        return None
    return read_request(request.read, "read.").in_turn(request.context_id)


def _ctxd_json(st: ContextState, page: views.Page, blocks: bool) -> tuple[str, str]:
    return slice_json(providers.CTXD, st, page, False, blocks=blocks)


def answer(
    st: ContextState,
    req: reads.ReadRequest,
    compactions: Callable[[ContextState], list[CompactionInfo]],
) -> pb.GetContextResponse | bytes:
    """The reply to ``req`` from ``st``, converted without awaiting so the
    record cannot change underneath; ``compactions``: the records of a
    context's compactions (a full view lists them)."""
    reply = reads.read(st, req, _ctxd_json)
    resp = pb.GetContextResponse(info=info_to_pb(st.info()))
    if reply.view == reads.INFO:
        return resp
    resp.messages_json, resp.system_json = reply.messages_json, reply.system_json
    resp.next_page_token, resp.change = reply.next_token, _CHANGE[reply.change]
    # Assembled from each message's encoded bytes (see ctxd_sidecar.server.wire).
    if reply.view == views.FULL:
        meta = context_meta_pb(st)
        meta.compactions.extend(record_pb(r) for r in compactions(st))
        return wire.full_reply(resp, meta, reply.messages)
    if req.fmt:
        return resp
    blocks = slice_blocks_pb(st) if reply.blocks else []
    return wire.slice_reply(resp, blocks, reply.messages)


def serialized(reply: pb.GetContextResponse | bytes) -> bytes:
    return reply if isinstance(reply, bytes) else reply.SerializeToString()
