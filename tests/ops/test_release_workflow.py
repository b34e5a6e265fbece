"""The release workflow's steps name what the repository has: the test files
it runs exist, and the folders it packs into are made first. And the extras
a documented command installs hold what that command imports."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = (ROOT / ".github" / "workflows" / "release.yml").read_text()


def test_every_test_path_the_release_runs_exists():
    paths = re.findall(r"\btests/[\w/.-]+\.py\b", WORKFLOW)
    assert paths, "the release runs no test file"
    missing = [p for p in paths if not (ROOT / p).is_file()]
    assert not missing, f"release.yml runs test files that are not there: {missing}"


def test_npm_pack_destinations_are_made_before_the_pack():
    for dest in re.findall(r"--pack-destination\s+([^\s)]+)", WORKFLOW):
        made = os.path.normpath(f"clients/typescript/{dest}")  # the step runs there
        before = WORKFLOW[: WORKFLOW.index(f"--pack-destination {dest}")]
        assert f"mkdir -p {made}" in before, f"nothing makes {made} before npm pack"


def test_the_bench_extra_installs_what_its_s3_replica_and_postgres_suites_import():
    """``pip install -e '.[bench]' && python -m bench``, as the benchmarks page says."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {re.split(r"[\[<>=]", req)[0] for req in extras["bench"]}
    assert {"moto", "boto3", "psycopg", "psycopg-pool"} <= names, names
