"""Every code block on the integration pages runs exactly as printed.

The blocks are taken from docs/integrations/*.md and run against a real
sidecar, the only change being the Quick start's address (127.0.0.1:50051)
swapped for the test sidecar's: Python blocks with the venv's interpreter,
TypeScript blocks with node inside clients/typescript (so ``ctxd-client``
and ``@openai/agents`` resolve as they do in an app that installed them).
Each uses its framework's scripted model, so none needs an API key.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs" / "integrations").glob("*.md"))
QUICK_START = "127.0.0.1:50051"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)\n```", re.S | re.M)


def _blocks(lang: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for n, (kind, code) in enumerate(_BLOCK.findall(page.read_text())):
            if kind == lang:
                found.append((f"{page.name}#{n}", code))
    return found


def test_every_block_is_a_language_the_suite_runs_or_an_install_line():
    for page in PAGES:
        for kind, code in _BLOCK.findall(page.read_text()):
            assert kind in ("python", "ts", "bash"), f"{page.name}: a ```{kind} block"
            if kind == "bash":
                assert all(
                    line.startswith(("pip install", "npm install")) for line in code.splitlines()
                ), code
            else:
                assert QUICK_START in code, (
                    f"{page.name}: a snippet not on the Quick start's address"
                )
    assert len(_blocks("python")) >= 5 and len(_blocks("ts")) >= 1


@pytest.mark.parametrize("name,code", _blocks("python"), ids=[n for n, _ in _blocks("python")])
def test_each_python_snippet_runs_as_printed(start_sidecar, name, code):
    pytest.importorskip("agents")
    pytest.importorskip("langchain")
    sc = start_sidecar("memory://")
    proc = subprocess.run(
        [sys.executable, "-c", code.replace(QUICK_START, sc.address)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "clients" / "python")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip(), f"{name} printed nothing"


@pytest.mark.parametrize("name,code", _blocks("ts"), ids=[n for n, _ in _blocks("ts")])
def test_each_typescript_snippet_runs_as_printed(start_sidecar, name, code):
    from tests.support.node_helpers import TS_CLIENT, npm_ci, require_node_and_npm

    require_node_and_npm()
    npm_ci(TS_CLIENT)
    sc = start_sidecar("memory://")
    script = TS_CLIENT / f".doc-snippet-{os.getpid()}.mjs"
    script.write_text(code.replace(QUICK_START, sc.address))
    try:
        proc = subprocess.run(
            [shutil.which("node") or "node", script.name],
            cwd=TS_CLIENT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        script.unlink()
    assert proc.returncode == 0, f"{name}:\n{proc.stderr[-3000:]}"
    assert "Hi! How can I help?" in proc.stdout, proc.stdout
