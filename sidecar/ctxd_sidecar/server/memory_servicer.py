"""gRPC adapter for ``ctxd.v1.MemoryService`` over :mod:`ctxd_sidecar.core.memory`.

Converts protobuf <-> domain objects and nothing else; validation, storage
and errors live in the core (errors become statuses in
:mod:`ctxd_sidecar.server.layers`).
"""

from __future__ import annotations

import grpc

from ctxd_sidecar.api.ctxd.v1 import memory_pb2, memory_pb2_grpc
from ctxd_sidecar.core.memory import Memory, MemoryRecord, SearchRequest, SetRequest

_Record = memory_pb2.MemoryRecord
_GetResponse = memory_pb2.GetResponse
_SetResponse = memory_pb2.SetResponse
_DeleteResponse = memory_pb2.DeleteResponse
_ListResponse = memory_pb2.ListResponse


def _to_pb(rec: MemoryRecord) -> memory_pb2.MemoryRecord:
    return _Record(
        key=rec.key,
        value_json=rec.value_json or "",
        version=rec.version,
        updated_ms=rec.updated_ms,
        expires_at_ms=rec.expires_at_ms,
        by=rec.by,
    )


def _set_request(request: memory_pb2.SetRequest) -> SetRequest:
    return SetRequest(
        key=request.key,
        value_json=request.value_json,
        ttl_seconds=request.ttl_seconds,
        expected_version=request.expected_version,
        create_only=request.create_only,
        by=request.by,
        vectors={v.field: list(v.values) for v in request.vectors},
        embed_fields=tuple(request.embed_fields),
    )


def _search_request(request: memory_pb2.SearchRequest) -> SearchRequest:
    return SearchRequest(
        prefix=request.prefix,
        text=request.query_text,
        vector=tuple(request.query_vector),
        filter_json=request.filter_json,
        limit=request.limit,
        offset=request.offset,
        include_values=request.include_values,
        fields=tuple(request.fields),
    )


class MemoryServicer(memory_pb2_grpc.MemoryServiceServicer):
    """``ctxd.v1.MemoryService`` over one :class:`Memory`: each method turns
    the request into the domain's call and its answer into the response."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    async def Get(
        self, request: memory_pb2.GetRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.GetResponse:
        return _GetResponse(record=_to_pb(await self.memory.get(request.key)))

    async def Set(
        self, request: memory_pb2.SetRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.SetResponse:
        rec = await self.memory.write(_set_request(request))
        return _SetResponse(record=_to_pb(rec))

    async def Delete(
        self, request: memory_pb2.DeleteRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.DeleteResponse:
        deleted = await self.memory.delete(request.key, expected_version=request.expected_version)
        return _DeleteResponse(deleted=deleted)

    async def List(
        self, request: memory_pb2.ListRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.ListResponse:
        page = await self.memory.list(
            request.prefix,
            limit=request.limit,
            page_token=request.page_token,
            include_values=request.include_values,
        )
        return _ListResponse(
            records=[_to_pb(r) for r in page.records], next_page_token=page.next_page_token
        )

    async def Search(
        self, request: memory_pb2.SearchRequest, context: grpc.aio.ServicerContext
    ) -> memory_pb2.SearchResponse:
        hits = await self.memory.search(_search_request(request))
        return memory_pb2.SearchResponse(
            hits=[
                memory_pb2.SearchHit(record=_to_pb(h.record), score=h.score, field=h.field)
                for h in hits
            ]
        )
