"""Shared by the tests that run Node.js: skip with a reason when node or npm
is missing, and install a package's locked dependencies once per session."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TS_CLIENT = ROOT / "clients" / "typescript"
_installed: set[Path] = set()


def require_node_and_npm() -> None:
    """Module-level skip: these tests need both node and npm on PATH."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.skip(
            f"{' and '.join(missing)} not installed (scripts/test.sh needs Node.js 20+ with npm "
            "for the TypeScript client and the Node example)",
            allow_module_level=True,
        )


def npm_ci(package: Path) -> None:
    """``npm ci`` in ``package`` (which also builds it, through ``prepare``), once a session."""
    if package in _installed:
        return
    proc = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund"],
        cwd=package,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"npm ci in {package} failed:\n{proc.stdout}\n{proc.stderr}"
    _installed.add(package)
