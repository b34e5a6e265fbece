"""``memory.mcp_server``: memory operations routed to a real MCP memory
server (tests/support/mcp_memory_server.py, built on the ``mcp`` SDK) over stdio and
streamable HTTP, with ctxd still validating every request."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as pb
from tests.conftest import free_port
from tests.support.memory_helpers import (
    assert_bad_field,
    assert_cap,
    call,
    fails,
    get,
    list_all,
    put,
)

SERVER = Path(__file__).parents[1] / "support" / "mcp_memory_server.py"


def stdio_command(data: Path, *extra: str) -> str:
    return " ".join([sys.executable, str(SERVER), "--data", str(data), *extra])


def saved(data: Path) -> dict:
    return json.loads(data.read_text()) if data.exists() else {}


def test_memory_is_served_by_the_mcp_server_over_stdio(start_sidecar, tmp_path):
    data = tmp_path / "mcp-state.json"
    r = start_sidecar(
        "memory://", memory__mcp_server=stdio_command(data), memory__max_value_bytes=64
    )
    stub = r.memory
    big = '{"id": 12345678901234567890123, "name": "日本 😀"}'
    rec = put(stub, "user/1", big, by="planner", ttl_seconds=3600)
    assert (rec.value_json, rec.by) == (big, "planner")
    assert rec.version and rec.expires_at_ms > rec.updated_ms > 0
    assert get(stub, "user/1").value_json == big

    # The value lives in the MCP server, not in ctxd's store.
    assert saved(data)["user/1"]["value_json"] == big
    storage = r.extra["sidecar"].storage
    assert call(r, storage.get("memory/user/1")) is None

    put(stub, "user/2", "2")
    put(stub, "other", "3")
    assert [x.key for x in list_all(stub, "user/")] == ["user/1", "user/2"]
    page = stub.List(pb.ListRequest(limit=2, include_values=True))
    assert [x.key for x in page.records] == ["other", "user/1"] and page.next_page_token
    assert page.records[1].value_json == big
    rest = stub.List(pb.ListRequest(limit=2, page_token=page.next_page_token))
    assert [x.key for x in rest.records] == ["user/2"] and not rest.next_page_token

    # Server errors map to the right codes.
    assert fails(lambda: get(stub, "nope")).code() == grpc.StatusCode.NOT_FOUND
    assert (
        fails(lambda: put(stub, "user/1", "0", create_only=True)).code() == grpc.StatusCode.ABORTED
    )
    err = fails(lambda: put(stub, "user/1", "0", expected_version="stale"))
    assert err.code() == grpc.StatusCode.ABORTED
    assert put(stub, "user/1", "5", expected_version=rec.version).value_json == "5"
    assert stub.Delete(pb.DeleteRequest(key="user/2")).deleted
    assert not stub.Delete(pb.DeleteRequest(key="user/2")).deleted
    assert "user/2" not in saved(data)

    # ctxd validates before anything reaches the server.
    before = saved(data)
    assert_bad_field(fails(lambda: put(stub, "../escape", "1")), "key")
    assert_bad_field(fails(lambda: put(stub, "ok", "NaN")), "value_json")
    assert_cap(fails(lambda: put(stub, "ok", '"' + "x" * 70 + '"')), "memory.max_value_bytes", 64)
    assert saved(data) == before


def test_tool_names_are_configurable_and_http_servers_work(start_sidecar, tmp_path):
    data = tmp_path / "kv.json"
    r = start_sidecar(
        "memory://",
        memory__mcp_server=stdio_command(data, "--tool-prefix", "kv_"),
        memory__mcp_tools="get=kv_get, set=kv_set,delete=kv_delete,list=kv_list",
    )
    put(r.memory, "k", '"via kv_set"')
    assert get(r.memory, "k").value_json == '"via kv_set"'
    assert saved(data)["k"]["value_json"] == '"via kv_set"'

    port = free_port()
    http_data = tmp_path / "http.json"
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--data", str(http_data), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, proc)
        h = start_sidecar("memory://", memory__mcp_server=f"http://127.0.0.1:{port}/mcp")
        put(h.memory, "over/http", "[1, 2]")
        assert [x.value_json for x in list_all(h.memory, include_values=True)] == ["[1, 2]"]
        assert saved(http_data)["over/http"]["value_json"] == "[1, 2]"
    finally:
        proc.terminate()
        proc.wait(10)


def test_tool_mapping_typos_and_dead_servers_fail_at_start(start_sidecar, tmp_path):
    with pytest.raises(ValueError, match="memory.mcp_tools"):
        start_sidecar(
            "memory://",
            memory__mcp_server=stdio_command(tmp_path / "x.json"),
            memory__mcp_tools="fetch=kv_get",
        )
    with pytest.raises(ValueError, match="memory.mcp_server"):
        start_sidecar("memory://", memory__mcp_server="/nonexistent/mcp-server --stdio")


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the MCP HTTP server exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError("the MCP HTTP server did not listen")
