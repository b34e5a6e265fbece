"""The TypeScript client installs from a clone as the README says, and the
clone is left as it was (``npm install ./clients/typescript`` linked the
folder and built it there, and in a fresh clone failed: no tsc)."""

from __future__ import annotations

import json
import subprocess

from tests.support.node_helpers import ROOT, require_node_and_npm

require_node_and_npm()


def _clone_state() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--", "clients/typescript", "scripts"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_the_documented_install_builds_outside_the_clone_and_imports(tmp_path):
    before = _clone_state()
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(
        json.dumps({"name": "app", "private": True, "type": "module"})
    )
    cmd = 'npm install --no-audit --no-fund "$(bash "$CTXD/scripts/pack-ts-client.sh")"'
    proc = subprocess.run(
        ["bash", "-c", cmd],
        cwd=app,
        env={**__import__("os").environ, "CTXD": str(ROOT), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run = subprocess.run(
        ["node", "-e", 'import("ctxd-client").then((m) => console.log(typeof m.CtxdClient))'],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.stdout.strip() == "function", run.stderr
    assert _clone_state() == before
