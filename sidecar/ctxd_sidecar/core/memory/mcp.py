"""Memory served by an MCP memory server's tools (``memory.mcp_server``).

ctxd still validates every request (key rules, strict JSON, the value-size
cap, TTL and paging arguments); the server owns storage, versions, expiry,
listing and any other caps. ``memory.mcp_server`` is a command line (the
server is started as a child process and spoken to over stdio) or an
``http(s)://`` URL (streamable HTTP).

Tool mapping (names configurable with ``memory.mcp_tools``, e.g.
``"get=kv_get,list=kv_list"``; unnamed operations keep the defaults). Every
tool returns a JSON object, as structured content or as the JSON text of
its first text block:

``memory_get {key}``
    ``{found, value_json, version, updated_ms, expires_at_ms, by}``;
    ``found: false`` (or an error ``NOT_FOUND: …``) means no live record.
``memory_set {key, value_json, ttl_seconds, expected_version, create_only, by}``
    the stored record, same fields as ``memory_get`` (``found`` optional).
``memory_delete {key, expected_version}``
    ``{deleted}``.
``memory_list {prefix, limit, page_token, include_values}``
    ``{records: [record…], next_page_token}``.

A record may carry ``value`` (any JSON) instead of ``value_json`` (text).
Empty strings, 0 and false stand for "not given" in arguments. Errors are
tool results with ``isError`` whose text starts with a gRPC code name:
``INVALID_ARGUMENT: <field>: …``, ``NOT_FOUND: …``, ``ABORTED: …`` (version
mismatch), ``RESOURCE_EXHAUSTED: …``; anything else is UNAVAILABLE.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from ctxd_sidecar.config import MemoryConfig
from ctxd_sidecar.core import errors
from ctxd_sidecar.core.errors import CtxdError, NotFound, Unavailable
from ctxd_sidecar.core.memory import MemoryBackend, MemoryPage, MemoryRecord, SetRequest
from ctxd_sidecar.mcp import McpSession, McpTarget, OnDemandConnection, error_kind

log = logging.getLogger(__name__)

OPERATIONS = ("get", "set", "delete", "list")
#: Seconds a server gets to start and answer ``initialize`` (interpreters can be slow to start).
START_TIMEOUT = 60.0
DEFAULT_TOOLS = {op: f"memory_{op}" for op in OPERATIONS}
_REQUEST_FIELDS = {
    "key",
    "value_json",
    "ttl_seconds",
    "expected_version",
    "create_only",
    "by",
    "prefix",
    "limit",
    "page_token",
    "include_values",
}
_ERROR = re.compile(
    r"\b(INVALID_ARGUMENT|NOT_FOUND|ABORTED|ALREADY_EXISTS|RESOURCE_EXHAUSTED|"
    r"FAILED_PRECONDITION|UNAVAILABLE):\s*(.*)",
    re.DOTALL,
)


def parse_tool_map(spec: str) -> dict[str, str]:
    """``"get=kv_get,set=kv_put"`` -> the full operation -> tool-name map."""
    tools = dict(DEFAULT_TOOLS)
    for part in filter(None, (p.strip() for p in spec.split(","))):
        op, sep, name = part.partition("=")
        op, name = op.strip(), name.strip()
        if not sep or op not in OPERATIONS or not name:
            raise ValueError(
                f"memory.mcp_tools: {part!r} must be OPERATION=TOOL with OPERATION one of "
                + ", ".join(OPERATIONS)
            )
        tools[op] = name
    return tools


class McpMemory(MemoryBackend):
    """A :class:`MemoryBackend` that calls an MCP server's memory tools."""

    def __init__(self, config: MemoryConfig) -> None:
        line = config.mcp_server.strip()
        if not line:
            raise ValueError("memory.mcp_server is empty")
        if not line.startswith(("http://", "https://")) and not shlex.split(line):
            raise ValueError("memory.mcp_server must be a command line or an http(s) URL")
        self.target = McpTarget.parse(line)
        self.tools = parse_tool_map(config.mcp_tools)
        if config.mcp_timeout <= 0:
            raise ValueError("memory.mcp_timeout must be positive")
        self.timeout = config.mcp_timeout
        self._connection = OnDemandConnection(
            self.target,
            label="memory",
            start_timeout=max(self.timeout, START_TIMEOUT),
            on_open=lambda _session: log.info(
                "MCP memory server connected", extra={"tools": self.tools}
            ),
        )

    # -- connection -------------------------------------------------------------
    async def start(self) -> None:
        if importlib.util.find_spec("mcp") is None:
            raise ValueError(
                "memory.mcp_server needs the mcp package: pip install 'ctxd-sidecar[mcp]'"
            )
        try:
            await self._session()
        except Unavailable as exc:
            raise ValueError(f"cannot use memory.mcp_server: {exc.message}") from None

    async def stop(self) -> None:
        await self._connection.close()

    async def _session(self) -> McpSession:
        try:
            return await self._connection.session()
        except TimeoutError:
            raise Unavailable("the MCP memory server did not start in time") from None
        except Exception as exc:  # noqa: BLE001 - reported without internals
            raise Unavailable(f"the MCP memory server is unreachable ({error_kind(exc)})") from None

    async def _call(self, op: str, arguments: dict[str, Any]) -> dict[str, Any]:
        session = await self._session()
        try:
            result = await session.call_tool(self.tools[op], arguments, self.timeout)
        except TimeoutError:
            raise Unavailable("the MCP memory server did not answer in time") from None
        except CtxdError:
            raise
        except Exception as exc:  # noqa: BLE001 - transport or protocol failure
            raise Unavailable(f"the MCP memory server call failed ({error_kind(exc)})") from None
        content = getattr(result, "content", None) or []
        text = next((c.text for c in content if getattr(c, "type", "") == "text"), "")
        if _attr(result, "is_error", "isError"):
            raise _error_from(text, self.tools[op])
        data = _attr(result, "structured_content", "structuredContent")
        if data is None:
            try:
                data = json.loads(text) if text else {}
            except ValueError:
                raise Unavailable(f"the MCP tool {self.tools[op]} did not return JSON") from None
        if isinstance(data, dict) and set(data) == {"result"} and isinstance(data["result"], dict):
            data = data["result"]
        if not isinstance(data, dict):
            raise Unavailable(f"the MCP tool {self.tools[op]} did not return a JSON object")
        return data

    # -- operations ---------------------------------------------------------------
    async def get(self, key: str) -> MemoryRecord:
        data = await self._call("get", {"key": key})
        if data.get("found") is False:
            raise NotFound(f"memory key {key!r} not found")
        return _record(data, key, with_value=True)

    async def set(self, request: SetRequest) -> MemoryRecord:
        data = await self._call(
            "set",
            {
                "key": request.key,
                "value_json": request.value_json,
                "ttl_seconds": request.ttl_seconds,
                "expected_version": request.expected_version,
                "create_only": request.create_only,
                "by": request.by,
            },
        )
        rec = _record(data, request.key, with_value=True)
        if not rec.value_json:
            rec.value_json = request.value_json
        return rec

    async def delete(self, key: str, *, expected_version: str) -> bool:
        data = await self._call("delete", {"key": key, "expected_version": expected_version})
        return bool(data.get("deleted", False))

    async def list(
        self, prefix: str, *, limit: int, page_token: str, include_values: bool
    ) -> MemoryPage:
        data = await self._call(
            "list",
            {
                "prefix": prefix,
                "limit": limit,
                "page_token": page_token,
                "include_values": include_values,
            },
        )
        raw = data.get("records") or []
        if not isinstance(raw, list):
            raise Unavailable(f"the MCP tool {self.tools['list']} returned malformed records")
        records = [_record(r, "", with_value=include_values) for r in raw if isinstance(r, dict)]
        records.sort(key=lambda r: r.key.encode())
        return MemoryPage(records[:limit], str(data.get("next_page_token") or ""))


def _attr(obj: Any, *names: str) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _record(data: Mapping[str, Any], key: str, *, with_value: bool) -> MemoryRecord:
    value: str | None = None
    if with_value:
        if isinstance(data.get("value_json"), str):
            value = data["value_json"]
        elif "value" in data:
            value = json.dumps(data["value"], ensure_ascii=False)
        else:
            value = ""
    try:
        return MemoryRecord(
            key=str(data.get("key") or key),
            value_json=value,
            version=str(data.get("version") or ""),
            updated_ms=int(data.get("updated_ms") or 0),
            expires_at_ms=int(data.get("expires_at_ms") or 0),
            by=str(data.get("by") or ""),
        )
    except (TypeError, ValueError):
        raise Unavailable("the MCP memory server returned a malformed record") from None


#: Error codes a tool may answer with whose ctxd error carries only the message.
_ERRORS_BY_CODE: dict[str, Callable[[str], CtxdError]] = {
    "NOT_FOUND": errors.NotFound,
    "ABORTED": errors.Conflict,
    "ALREADY_EXISTS": errors.Conflict,
    "FAILED_PRECONDITION": errors.FailedPrecondition,
}


def _error_from(text: str, tool: str) -> CtxdError:
    m = _ERROR.search(text or "")
    if m is None:
        return Unavailable(f"the MCP tool {tool} failed: {(text or 'no message')[:200]}")
    code, message = m.group(1), m.group(2).strip()[:500]
    if code == "INVALID_ARGUMENT":
        field, sep, rest = message.partition(":")
        if sep and field.strip() in _REQUEST_FIELDS:
            return errors.InvalidArgument(field.strip(), rest.strip())
        return errors.InvalidArgument("request", message)
    if code == "RESOURCE_EXHAUSTED":
        return errors.LimitExceeded("memory.mcp_server", 0, message)
    return _ERRORS_BY_CODE.get(code, Unavailable)(message)
