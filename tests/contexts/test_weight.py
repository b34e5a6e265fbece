"""The default (LMDB) pays for nothing it does not use: starting the plugin
manager and the server imports neither boto3, openai nor mcp; each is an
extra, and a configuration that needs one without it says which."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import ctxd_sidecar.server.app
from ctxd_sidecar.plugin.manager import plugin_manager, open_store
pm = plugin_manager()
store = open_store("lmdb://{path}", pm)
store.close()
print(sorted(m for m in ("boto3", "botocore", "openai", "mcp") if m in sys.modules))
"""


def test_starting_on_lmdb_imports_no_extra(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(path=tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_extras_are_declared():
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    deps = " ".join(project["dependencies"])
    assert not any(name in deps for name in ("boto3", "openai", "mcp"))
    extras = project["optional-dependencies"]
    assert {"s3", "openai", "mcp", "all"} <= set(extras)
    assert project["name"] == "ctxd-sidecar" and project["scripts"]["ctxd"]
