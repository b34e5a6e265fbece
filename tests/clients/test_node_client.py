"""A non-Python runtime (Node.js, the ctxd-client package) drives a real sidecar,
on a store that already holds keys of its own."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2, memory_pb2
from tests.support.node_helpers import ROOT, TS_CLIENT, npm_ci, require_node_and_npm

require_node_and_npm()

CLIENT = ROOT / "examples" / "node-client"


@pytest.fixture(scope="module")
def installed():
    npm_ci(TS_CLIENT)  # builds the package the example links to
    npm_ci(CLIENT)


@pytest.mark.parametrize("backend", ["lmdb", "s3"])
def test_node_client_appends_compacts_and_uses_memory(
    installed, start_sidecar, store_uri_for, backend
):
    sc = start_sidecar(store_uri_for(backend))
    # What the README's buf curl examples write: the example must not trip over them.
    sc.memory.Set(memory_pb2.SetRequest(key="user/name", value_json='"Ada"'), timeout=10)
    sc.contexts.AppendTurn(
        context_pb2.AppendTurnRequest(
            context_id="demo", messages=[context_pb2.Message(user={"text": "hello"})]
        ),
        timeout=10,
    )
    proc = subprocess.run(
        ["node", "client.js"],
        cwd=CLIENT,
        env={**os.environ, "CTXD_ADDRESS": sc.address},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] is True
    assert int(result["compaction"]["folded"]) > 0
    assert result["appended"]["version"] == "10"
    listed = sc.memory.List(memory_pb2.ListRequest(), timeout=10).records
    assert [r.key for r in listed] == ["user/name"], "the example leaves others' keys alone"
