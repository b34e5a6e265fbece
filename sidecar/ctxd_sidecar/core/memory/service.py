"""The memory service and the backend interface it validates requests for."""

from __future__ import annotations

import abc
from typing import Any

from ctxd_sidecar.config import MemoryConfig
from ctxd_sidecar.core.memory.records import MemoryPage, MemoryRecord, SetRequest
from ctxd_sidecar.core.memory.validate import (
    list_limit,
    validate_key,
    validate_prefix,
    validate_set,
    validate_version,
)


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


class Memory:
    """The memory service: validates requests, then hands them to a backend."""

    def __init__(self, config: MemoryConfig, backend: MemoryBackend) -> None:
        self.config = config
        self.backend = backend

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
        return await self.backend.set(request)

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
