"""Op builders of a context's history: ListVersions and ForkContext (the
reads at a version are ``at_version=`` on the read verbs, in ``_ops``)."""

from __future__ import annotations

import uuid

from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client._ops import CONTEXT, Call, Op


def versions(context_id: str, *, page_size: int = 0) -> Op:
    """Every kept version, newest first (all pages)."""
    req = pb.ListVersionsRequest(context_id=context_id, page_size=page_size)
    out: list = []
    while True:
        resp = yield Call(CONTEXT, "ListVersions", req, retry=True)
        out.extend(resp.versions)
        if not resp.next_page_token:
            return out
        req.page_token = resp.next_page_token


def fork(
    source_id: str,
    context_id: str,
    *,
    at_version: int = 0,
    idempotency_key: str | None = None,
) -> Op:
    req = pb.ForkContextRequest(
        source_id=source_id,
        context_id=context_id,
        at_version=at_version,
        idempotency_key=idempotency_key or uuid.uuid4().hex,
    )
    return (yield Call(CONTEXT, "ForkContext", req, retry=True)).info
