"""The verbs of a context's history: ListVersions and ForkContext (the reads
at a version are ``at_version=`` on the read verbs, in ``_context_ops``)."""

from __future__ import annotations

import uuid

from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client._ops import CONTEXT, Call, Op, paged_items, verb


class _HistoryVerbs:
    """A context's versions and forks (see docs/history.md)."""

    @verb
    def versions(
        self, context_id: str, *, page_size: int = 0, timeout: float | None = None
    ) -> Op[list[pb.VersionInfo]]:
        """The versions still readable with ``at_version``, newest first:
        what each change was, when, and the size after it."""
        req = pb.ListVersionsRequest(context_id=context_id, page_size=page_size)
        return (yield from paged_items(CONTEXT, "ListVersions", req, "versions"))

    @verb
    def fork(
        self,
        source_id: str,
        context_id: str,
        *,
        at_version: int = 0,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Op[pb.ContextInfo]:
        """A new conversation ``context_id`` holding ``source_id`` as of
        ``at_version`` (0: the latest), independent afterwards. Retried
        safely (one idempotency key for every attempt)."""
        req = pb.ForkContextRequest(
            source_id=source_id,
            context_id=context_id,
            at_version=at_version,
            idempotency_key=idempotency_key or uuid.uuid4().hex,
        )
        return (yield Call(CONTEXT, "ForkContext", req, retry=True)).info
