"""A real MCP memory server (stdio or streamable HTTP) for the override tests.

Implements the tool contract documented in :mod:`ctxd_sidecar.core.memory.mcp`
with the ``mcp`` SDK and keeps its records in a JSON file, so a test can
see that values went to this server and not to ctxd's store::

    python tests/support/mcp_memory_server.py --data state.json [--tool-prefix kv_]
                                      [--http PORT]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from typing import Any

try:  # mcp >= 2
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server
    from mcp.server.fastmcp.exceptions import ToolError


class Records:
    """``key -> record`` persisted to a JSON file after every change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data: dict[str, dict[str, Any]] = {}
        if os.path.exists(path):
            with open(path) as fh:
                self.data = json.load(fh)

    def save(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(self.data, fh)
        os.replace(tmp, self.path)

    def live(self, key: str) -> dict[str, Any] | None:
        rec = self.data.get(key)
        if rec and rec["expires_at_ms"] and rec["expires_at_ms"] <= time.time() * 1000:
            return None
        return rec


def build(records: Records, prefix: str, **server_kwargs: Any) -> Server:
    server = Server("memory-test-server", **server_kwargs)

    @server.tool(name=f"{prefix}get")
    def get(key: str) -> dict[str, Any]:
        rec = records.live(key)
        return {"found": False} if rec is None else {"found": True, **rec}

    @server.tool(name=f"{prefix}set")
    def set_(
        key: str,
        value_json: str,
        ttl_seconds: int = 0,
        expected_version: str = "",
        create_only: bool = False,
        by: str = "",
    ) -> dict[str, Any]:
        current = records.live(key)
        if create_only and current is not None:
            raise ToolError(f"ABORTED: {key} already exists")
        if expected_version and (current is None or current["version"] != expected_version):
            raise ToolError(f"ABORTED: {key} is not at version {expected_version}")
        now = int(time.time() * 1000)
        rec = {
            "key": key,
            "value_json": value_json,
            "version": uuid.uuid4().hex,
            "updated_ms": now,
            "expires_at_ms": now + ttl_seconds * 1000 if ttl_seconds else 0,
            "by": by,
        }
        records.data[key] = rec
        records.save()
        return rec

    @server.tool(name=f"{prefix}delete")
    def delete(key: str, expected_version: str = "") -> dict[str, Any]:
        current = records.live(key)
        if expected_version and (current is None or current["version"] != expected_version):
            raise ToolError(f"ABORTED: {key} is not at version {expected_version}")
        existed = records.data.pop(key, None) is not None
        records.save()
        return {"deleted": existed and current is not None}

    @server.tool(name=f"{prefix}list")
    def list_(
        prefix: str = "", limit: int = 100, page_token: str = "", include_values: bool = False
    ) -> dict[str, Any]:
        keys = sorted(k for k in records.data if k.startswith(prefix) and k > page_token)
        keys = [k for k in keys if records.live(k) is not None]
        page = keys[:limit]
        out = []
        for k in page:
            rec = dict(records.data[k])
            if not include_values:
                rec.pop("value_json")
            out.append(rec)
        more = len(keys) > limit
        return {"records": out, "next_page_token": page[-1] if more else ""}

    return server


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tool-prefix", default="memory_")
    ap.add_argument("--http", type=int, default=0, help="serve streamable HTTP on this port")
    args = ap.parse_args()
    records = Records(args.data)
    if args.http:
        try:  # mcp >= 2 takes the address when run
            build(records, args.tool_prefix).run(
                transport="streamable-http", host="127.0.0.1", port=args.http
            )
        except TypeError:  # mcp 1.x takes it as settings
            server = build(records, args.tool_prefix, host="127.0.0.1", port=args.http)
            server.run(transport="streamable-http")
    else:
        build(records, args.tool_prefix).run()


if __name__ == "__main__":
    main()
