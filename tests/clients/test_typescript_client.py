"""The TypeScript client (clients/typescript) runs its own tests, with node's
test runner, against a real sidecar."""

from __future__ import annotations

import os
import subprocess

from tests.support.node_helpers import TS_CLIENT, npm_ci, require_node_and_npm

require_node_and_npm()


def test_typescript_client_suite_passes_against_a_sidecar(start_sidecar):
    sc = start_sidecar("memory://")
    npm_ci(TS_CLIENT)
    proc = subprocess.run(
        ["npm", "test"],
        cwd=TS_CLIENT,
        env={**os.environ, "CTXD_ADDRESS": sc.address},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "# fail 0" in proc.stdout and "# pass 0" not in proc.stdout, proc.stdout[-2000:]
