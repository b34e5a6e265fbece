"""ctxd's installed names are its own: PyPI's unrelated ``sidecar``
distribution (a JupyterLab widget) installed beside it changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def test_pypis_sidecar_beside_ctxd_leaves_ctxd_working(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    got = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), "sidecar"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if got.returncode != 0:
        pytest.skip(f"PyPI's sidecar could not be downloaded: {got.stderr.strip()[-200:]}")
    (wheel,) = wheels.glob("sidecar-*")
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert (site / "sidecar").is_dir()  # the other project's import package is there
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "plugins"],
        env=env,
        cwd=tmp_path,  # not the repository, whose sidecar/ folder would shadow it
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "lmdb: ctxd_plugins.lmdb_store" in out.stdout
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util, ctxd_sidecar.cli;"
            " print(importlib.util.find_spec('sidecar').origin)",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert str(site) in probe.stdout, probe.stderr
