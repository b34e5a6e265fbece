"""A small synchronous client: every call carries the token and a deadline,
and a failed call becomes an :class:`AdminError` naming the status."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ctxd_sidecar.admin.connect import AdminError, Target, rpc_error
from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc, memory_pb2_grpc
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb


class Client:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.channel = target.channel()
        self.contexts = context_pb2_grpc.ContextServiceStub(self.channel)
        self.memory = memory_pb2_grpc.MemoryServiceStub(self.channel)
        self.health_stub = health_pb2_grpc.HealthStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, method, request, *, timeout: float | None = -1.0):
        try:
            return method(
                request,
                timeout=self.target.timeout if timeout == -1.0 else timeout,
                metadata=self.target.metadata(),
            )
        except grpc.RpcError as exc:
            raise rpc_error(exc, self.target) from None

    # -- health -----------------------------------------------------------------------
    def health(self, service: str = "") -> str:
        resp = self.call(self.health_stub.Check, health_pb2.HealthCheckRequest(service=service))
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    # -- contexts ---------------------------------------------------------------------
    def list_contexts(self, *, include_archived: bool = False) -> Iterator[pb.ContextInfo]:
        token = ""
        while True:
            resp = self.call(
                self.contexts.ListContexts,
                pb.ListContextsRequest(
                    page_size=1000, page_token=token, include_archived=include_archived
                ),
            )
            yield from resp.contexts
            token = resp.next_page_token
            if not token:
                return

    def get_context(
        self, context_id: str, *, page_token: str = "", view=pb.CONTEXT_VIEW_FULL, at_version=0
    ):
        return self.call(
            self.contexts.GetContext,
            pb.GetContextRequest(
                context_id=context_id,
                view=view,
                consistency=pb.READ_CONSISTENCY_LATEST,
                page_token=page_token,
                at_version=at_version,
            ),
        )

    def list_versions(self, context_id: str) -> tuple[list[pb.VersionInfo], int]:
        """Every kept version, newest first, and the oldest one readable."""
        req = pb.ListVersionsRequest(context_id=context_id, page_size=1000)
        out: list[pb.VersionInfo] = []
        while True:
            resp = self.call(self.contexts.ListVersions, req)
            out.extend(resp.versions)
            if not resp.next_page_token:
                return out, resp.oldest_kept
            req.page_token = resp.next_page_token

    def fork(self, source_id: str, context_id: str, **kw) -> pb.ContextInfo:
        req = pb.ForkContextRequest(source_id=source_id, context_id=context_id, **kw)
        return self.call(self.contexts.ForkContext, req).info

    def info(self, context_id: str) -> pb.ContextInfo | None:
        try:
            return self.get_context(context_id, view=pb.CONTEXT_VIEW_INFO).info
        except AdminError as exc:
            if exc.message.startswith("NOT_FOUND"):
                return None
            raise

    def append(self, context_id: str, messages, *, idempotency_key: str = "", **attrs):
        return self.call(
            self.contexts.AppendTurn,
            pb.AppendTurnRequest(
                context_id=context_id,
                messages=messages,
                idempotency_key=idempotency_key,
                **attrs,
            ),
        )

    def create(self, context_id: str, **attrs) -> bool:
        req = pb.CreateContextRequest(context_id=context_id, **attrs)
        return self.call(self.contexts.CreateContext, req).created

    def delete(self, context_id: str) -> bool:
        req = pb.DeleteContextRequest(context_id=context_id)
        return self.call(self.contexts.DeleteContext, req).deleted

    def compact(self, context_id: str, **kw) -> pb.CompactResponse:
        return self.call(self.contexts.Compact, pb.CompactRequest(context_id=context_id, **kw))

    def plan_compaction(self, context_id: str, *, keep_last: int) -> pb.PlanCompactionResponse:
        return self.call(
            self.contexts.PlanCompaction,
            pb.PlanCompactionRequest(context_id=context_id, keep_last=keep_last),
        )

    def expand_compaction(self, context_id: str, compaction_id: str) -> list[pb.Message]:
        """Every page of the messages one compaction folded (verified by the server)."""
        req = pb.ExpandCompactionRequest(context_id=context_id, compaction_id=compaction_id)
        out: list[pb.Message] = []
        while True:
            resp = self.call(self.contexts.ExpandCompaction, req)
            out.extend(resp.messages)
            if not resp.next_page_token:
                return out
            req.page_token = resp.next_page_token

    def apply_compaction(self, context_id: str, plan_ref: str, answer: str):
        return self.call(
            self.contexts.ApplyCompaction,
            pb.ApplyCompactionRequest(context_id=context_id, plan_ref=plan_ref, answer=answer),
        )

    def update_plan(self, context_id: str, **op) -> pb.UpdatePlanResponse:
        req = pb.UpdatePlanRequest(context_id=context_id, **op)
        return self.call(self.contexts.UpdatePlan, req)

    def set_preflight(self, context_id: str, verdict_json: str) -> pb.SetPreflightResponse:
        req = pb.SetPreflightRequest(context_id=context_id, verdict_json=verdict_json)
        return self.call(self.contexts.SetPreflight, req)

    def watch(self, context_id: str) -> Iterator[pb.WatchContextResponse]:
        stream = self.contexts.WatchContext(
            pb.WatchContextRequest(context_id=context_id), metadata=self.target.metadata()
        )
        try:
            yield from stream
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise rpc_error(exc, self.target) from None
        finally:
            stream.cancel()

    # -- memory -----------------------------------------------------------------------
    def memory_get(self, key: str) -> mpb.MemoryRecord:
        return self.call(self.memory.Get, mpb.GetRequest(key=key)).record

    def memory_set(self, key: str, value_json: str, ttl: int = 0) -> mpb.MemoryRecord:
        req = mpb.SetRequest(key=key, value_json=value_json, ttl_seconds=ttl)
        return self.call(self.memory.Set, req).record

    def memory_delete(self, key: str) -> bool:
        return self.call(self.memory.Delete, mpb.DeleteRequest(key=key)).deleted

    def memory_list(self, prefix: str = "", *, values: bool = False):
        token = ""
        while True:
            resp = self.call(
                self.memory.List,
                mpb.ListRequest(prefix=prefix, limit=1000, page_token=token, include_values=values),
            )
            yield from resp.records
            token = resp.next_page_token
            if not token:
                return
