"""The memory service and the backend interface it validates requests for."""

from __future__ import annotations

import abc
import dataclasses
from typing import TYPE_CHECKING, Any

from ctxd_sidecar.config import MemoryConfig
from ctxd_sidecar.core.errors import FailedPrecondition
from ctxd_sidecar.core.memory.embed import Embedder, embed_fields, query_vector
from ctxd_sidecar.core.memory.records import (
    MemoryPage,
    MemoryRecord,
    SearchHit,
    SearchRequest,
    SetRequest,
)
from ctxd_sidecar.core.memory.validate import (
    list_limit,
    validate_key,
    validate_prefix,
    validate_search,
    validate_set,
    validate_vectors,
    validate_version,
)

if TYPE_CHECKING:
    from ctxd_sidecar.core.memory.search import StoreSearch

_NO_SEARCH = "memory search needs memory kept in the store (memory.mcp_server is set)"


class MemoryBackend(abc.ABC):
    """Where memory lives. Requests reaching a backend are already validated."""

    async def start(self) -> None:  # noqa: B027 - optional
        """Start background work."""

    async def stop(self) -> None:  # noqa: B027 - optional
        """Stop background work."""

    @abc.abstractmethod
    async def get(self, key: str) -> MemoryRecord: ...

    @abc.abstractmethod
    async def set(self, request: SetRequest) -> MemoryRecord: ...

    @abc.abstractmethod
    async def delete(self, key: str, *, expected_version: str) -> bool: ...

    @abc.abstractmethod
    async def list(
        self, prefix: str, *, limit: int, page_token: str, include_values: bool
    ) -> MemoryPage: ...

    #: Where the records' vectors are searched (None: a backend without search).
    search_index: StoreSearch | None = None

    def searcher(self) -> StoreSearch:
        if self.search_index is None:
            raise FailedPrecondition(_NO_SEARCH)
        return self.search_index


class Memory:
    """The memory service: validates requests, then hands them to a backend."""

    def __init__(
        self, config: MemoryConfig, backend: MemoryBackend, embedder: Embedder | None = None
    ) -> None:
        self.config = config
        self.backend = backend
        #: Turns text into vectors (``memory.embedder``); None: callers give vectors.
        self.embedder = embedder

    async def start(self) -> None:
        await self.backend.start()

    async def stop(self) -> None:
        await self.backend.stop()

    async def get(self, key: str) -> MemoryRecord:
        validate_key(key)
        return await self.backend.get(key)

    async def write(self, request: SetRequest) -> MemoryRecord:
        """Validate one Set and hand it to the backend."""
        validate_set(request, self.config)
        vectors = validate_vectors(request.vectors, request.embed_fields)
        if request.embed_fields:
            vectors.update(await embed_fields(self.embedder, request))
        if vectors:
            await self.backend.searcher().fix_dims(vectors)
        return await self.backend.set(dataclasses.replace(request, vectors=vectors))

    async def set(self, key: str, value_json: str, **options: Any) -> MemoryRecord:
        """:meth:`write` spelled with the :class:`SetRequest` fields (``ttl_seconds``,
        ``expected_version``, ``create_only``, ``by`` as keywords)."""
        return await self.write(SetRequest(key, value_json, **options))

    async def delete(self, key: str, *, expected_version: str = "") -> bool:
        validate_key(key)
        validate_version(expected_version)
        return await self.backend.delete(key, expected_version=expected_version)

    async def list(
        self,
        prefix: str = "",
        *,
        limit: int = 0,
        page_token: str = "",
        include_values: bool = False,
    ) -> MemoryPage:
        validate_prefix(prefix)
        return await self.backend.list(
            prefix, limit=list_limit(limit), page_token=page_token, include_values=include_values
        )

    async def search(self, request: SearchRequest) -> list[SearchHit]:
        """Rank the live records under a prefix by similarity to a text or a vector."""
        request = validate_search(request)
        query = await query_vector(self.embedder, request)
        return await self.backend.searcher().search(request, query)
