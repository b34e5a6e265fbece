"""Agent memory: a durable JSON key/value space per instance.

:class:`Memory` validates every request (key rules, strict JSON, value cap,
TTL, paging) and hands it to a backend: :class:`StoreMemory` keeps records
in the sidecar's store; :class:`ctxd_sidecar.core.memory.mcp.McpMemory` routes
operations to an MCP memory server's tools.

The package by responsibility: :mod:`~ctxd_sidecar.core.memory.records` (records,
:class:`SetRequest`, the stored format), :mod:`~ctxd_sidecar.core.memory.validate`
(request rules), :mod:`~ctxd_sidecar.core.memory.service` (:class:`Memory` and
:class:`MemoryBackend`), :mod:`~ctxd_sidecar.core.memory.store` (:class:`StoreMemory`:
caps and their accounting), :mod:`~ctxd_sidecar.core.memory.expiry` (the expiry
schedule the sweeper works from).
"""

from ctxd_sidecar.core.memory.records import (
    NAMESPACE,
    MemoryPage,
    MemoryRecord,
    SearchHit,
    SearchRequest,
    SetRequest,
    decode_record,
    encode_record,
)
from ctxd_sidecar.core.memory.service import Memory, MemoryBackend
from ctxd_sidecar.core.memory.store import MAX_PAGE_VALUE_BYTES, MAX_WRITE_ATTEMPTS, StoreMemory
from ctxd_sidecar.core.memory.validate import (
    DEFAULT_LIST_LIMIT,
    MAX_BY_CHARS,
    MAX_KEY_CHARS,
    MAX_LIST_LIMIT,
    MAX_TTL_SECONDS,
    MAX_VERSION_CHARS,
    validate_key,
    validate_prefix,
)

__all__ = [
    "DEFAULT_LIST_LIMIT",
    "MAX_BY_CHARS",
    "MAX_KEY_CHARS",
    "MAX_LIST_LIMIT",
    "MAX_PAGE_VALUE_BYTES",
    "MAX_TTL_SECONDS",
    "MAX_VERSION_CHARS",
    "MAX_WRITE_ATTEMPTS",
    "NAMESPACE",
    "Memory",
    "MemoryBackend",
    "MemoryPage",
    "MemoryRecord",
    "SearchHit",
    "SearchRequest",
    "SetRequest",
    "StoreMemory",
    "decode_record",
    "encode_record",
    "validate_key",
    "validate_prefix",
]
