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

import asyncio
import contextlib
import json
import logging
import re
import shlex
from collections.abc import Mapping
from typing import Any

from sidecar.config import MemoryConfig
from sidecar.core.errors import (
    Conflict,
    CtxdError,
    FailedPrecondition,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    Unavailable,
)
from sidecar.core.memory import MemoryBackend, MemoryPage, MemoryRecord

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
        target = config.mcp_server.strip()
        if not target:
            raise ValueError("memory.mcp_server is empty")
        self.target = target
        self.is_http = target.startswith(("http://", "https://"))
        if not self.is_http and not shlex.split(target):
            raise ValueError("memory.mcp_server must be a command line or an http(s) URL")
        self.tools = parse_tool_map(config.mcp_tools)
        if config.mcp_timeout <= 0:
            raise ValueError("memory.mcp_timeout must be positive")
        self.timeout = config.mcp_timeout
        self._session: Any = None
        self._runner: asyncio.Task | None = None
        self._closing: asyncio.Event | None = None
        self._connect_lock = asyncio.Lock()

    # -- connection -------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self._connect()
        except Unavailable as exc:
            raise ValueError(f"cannot use memory.mcp_server: {exc.message}") from None

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        assert self._closing is not None
        self._closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(runner), 10)
        except (TimeoutError, Exception):  # noqa: BLE001 - shutting down anyway
            runner.cancel()
            with contextlib.suppress(BaseException):
                await runner

    async def _connect(self) -> Any:
        async with self._connect_lock:
            if self._session is not None and self._runner is not None and not self._runner.done():
                return self._session
            ready: asyncio.Future = asyncio.get_running_loop().create_future()
            self._closing = asyncio.Event()
            self._runner = asyncio.create_task(self._run(ready, self._closing), name="mcp-memory")
            try:
                await asyncio.wait_for(asyncio.shield(ready), max(self.timeout, START_TIMEOUT))
            except TimeoutError:
                self._runner.cancel()
                raise Unavailable("the MCP memory server did not start in time") from None
            except Exception as exc:  # noqa: BLE001 - reported without internals
                raise Unavailable(
                    f"the MCP memory server is unreachable ({_describe(exc)})"
                ) from None
            return self._session

    async def _run(self, ready: asyncio.Future, closing: asyncio.Event) -> None:
        """Own the session for its whole life (MCP sessions are task-bound)."""
        from mcp import ClientSession

        try:
            async with (
                self._transport() as streams,
                ClientSession(streams[0], streams[1]) as session,
            ):
                await session.initialize()
                self._session = session
                ready.set_result(None)
                log.info("MCP memory server connected", extra={"tools": self.tools})
                await closing.wait()
        except BaseException as exc:  # noqa: BLE001 - surfaced through `ready` or logged
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else Unavailable("cancelled"))
            elif not closing.is_set():
                log.warning("MCP memory server connection lost", extra={"error": _describe(exc)})
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._session = None

    def _transport(self):
        if self.is_http:
            try:
                from mcp.client.streamable_http import streamable_http_client as client
            except ImportError:  # mcp 1.x
                from mcp.client.streamable_http import streamablehttp_client as client
            return client(self.target)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        command, *args = shlex.split(self.target)
        return stdio_client(StdioServerParameters(command=command, args=args))

    async def _call(self, op: str, arguments: dict[str, Any]) -> dict[str, Any]:
        session = self._session or await self._connect()
        try:
            result = await asyncio.wait_for(
                session.call_tool(self.tools[op], arguments), self.timeout
            )
        except TimeoutError:
            raise Unavailable("the MCP memory server did not answer in time") from None
        except CtxdError:
            raise
        except Exception as exc:  # noqa: BLE001 - transport or protocol failure
            raise Unavailable(f"the MCP memory server call failed ({_describe(exc)})") from None
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

    async def set(
        self,
        key: str,
        value_json: str,
        value: bytes,
        *,
        ttl_seconds: int,
        expected_version: str,
        create_only: bool,
        by: str,
    ) -> MemoryRecord:
        data = await self._call(
            "set",
            {
                "key": key,
                "value_json": value_json,
                "ttl_seconds": ttl_seconds,
                "expected_version": expected_version,
                "create_only": create_only,
                "by": by,
            },
        )
        rec = _record(data, key, with_value=True)
        if not rec.value_json:
            rec.value_json = value_json
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


def _error_from(text: str, tool: str) -> CtxdError:
    m = _ERROR.search(text or "")
    if m is None:
        return Unavailable(f"the MCP tool {tool} failed: {(text or 'no message')[:200]}")
    code, message = m.group(1), m.group(2).strip()[:500]
    if code == "INVALID_ARGUMENT":
        field, sep, rest = message.partition(":")
        if sep and field.strip() in _REQUEST_FIELDS:
            return InvalidArgument(field.strip(), rest.strip())
        return InvalidArgument("request", message)
    if code == "NOT_FOUND":
        return NotFound(message)
    if code in {"ABORTED", "ALREADY_EXISTS"}:
        return Conflict(message)
    if code == "RESOURCE_EXHAUSTED":
        return LimitExceeded("memory.mcp_server", 0, message)
    if code == "FAILED_PRECONDITION":
        return FailedPrecondition(message)
    return Unavailable(message)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return type(exc).__name__
