"""A non-Python runtime (Node.js, @grpc/grpc-js) drives a real sidecar."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parent.parent / "examples" / "node-client"

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")


@pytest.fixture(scope="module")
def node_modules():
    if not (CLIENT / "node_modules" / "@grpc" / "grpc-js").exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=CLIENT,
            check=True,
            capture_output=True,
            timeout=300,
        )
    return CLIENT / "node_modules"


@pytest.mark.parametrize("backend", ["lmdb", "s3"])
def test_node_client_appends_compacts_and_uses_memory(
    node_modules, start_sidecar, store_uri_for, backend
):
    sc = start_sidecar(store_uri_for(backend))
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
