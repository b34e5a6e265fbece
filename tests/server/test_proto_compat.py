"""The protos as a product: lint, no breaking change against the last release,
and the same .proto files and descriptors in every package that ships them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.node_helpers import TS_CLIENT, npm_ci

ROOT = Path(__file__).resolve().parents[2]
PROTOS = sorted((ROOT / "proto" / "ctxd" / "v1").glob("*.proto"))
#: The last release; until it is tagged, the commit of the last landing before
#: the language package options were set.
RELEASE_TAG = "v0.1.0"
BASELINE = "7e401b2"
#: Options first set after BASELINE (the baseline had none, so nothing generated
#: from it can break); with a tag the full FILE rules apply.
NEW_OPTION_RULES = [
    "FILE_SAME_CSHARP_NAMESPACE",
    "FILE_SAME_GO_PACKAGE",
    "FILE_SAME_JAVA_MULTIPLE_FILES",
    "FILE_SAME_JAVA_PACKAGE",
    "FILE_SAME_OBJC_CLASS_PREFIX",
    "FILE_SAME_PHP_NAMESPACE",
]


def _buf() -> str:
    """buf from PATH, the venv (the dev extra), or the TypeScript package's devDependencies."""
    for candidate in (shutil.which("buf"), str(Path(sys.executable).parent / "buf")):
        if candidate and Path(candidate).exists():
            return candidate
    local = TS_CLIENT / "node_modules" / ".bin" / "buf"
    if not local.exists() and shutil.which("npm") and shutil.which("node"):
        npm_ci(TS_CLIENT)
    if local.exists():
        return str(local)
    pytest.skip("buf not installed (pip install -e '.[dev]', or npm ci in clients/typescript)")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_protos_lint_clean():
    proc = subprocess.run(
        [_buf(), "lint", "proto"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_breaking_change_against_the_last_release(tmp_path):
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: no release to compare with")
    buf = _buf()
    if _git("rev-parse", "-q", "--verify", f"refs/tags/{RELEASE_TAG}").returncode == 0:
        release, config = RELEASE_TAG, []
    elif _git("cat-file", "-e", f"{BASELINE}^{{commit}}").returncode == 0:
        rules = {"use": ["FILE"], "except": NEW_OPTION_RULES}
        inline = {"version": "v2", "modules": [{"path": "proto"}], "breaking": rules}
        release, config = BASELINE, ["--config", json.dumps(inline)]
    else:
        pytest.skip(f"neither tag {RELEASE_TAG} nor commit {BASELINE} is in this clone")
    # The release's protos exported with git itself: buf's own `.git#ref=` input
    # clones 50 commits deep and cannot reach a release further back.
    archive = subprocess.run(
        ["git", "archive", "--format=tar", release, "proto"],
        cwd=ROOT, capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(tmp_path)], input=archive.stdout, check=True)
    proc = subprocess.run(
        [buf, "breaking", "proto", "--against", str(tmp_path / "proto"), *config],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "copy",
    [
        "sidecar/ctxd_sidecar/api/ctxd/v1",
        "clients/python/ctxd_client/_api/ctxd/v1",
        "clients/typescript/proto/ctxd/v1",
    ],
)
def test_shipped_proto_copies_match_the_source(copy):
    for proto in PROTOS:
        assert (ROOT / copy / proto.name).read_bytes() == proto.read_bytes(), (
            f"{copy}/{proto.name} is stale: run scripts/gen_proto.sh"
        )


def test_server_and_client_generated_code_describe_the_same_api():
    if str(ROOT / "clients" / "python") not in sys.path:
        sys.path.insert(0, str(ROOT / "clients" / "python"))
    from ctxd_client._api.ctxd.v1 import context_pb2 as client_ctx
    from ctxd_client._api.ctxd.v1 import memory_pb2 as client_mem
    from ctxd_sidecar.api.ctxd.v1 import context_pb2, memory_pb2

    assert client_ctx.DESCRIPTOR.serialized_pb == context_pb2.DESCRIPTOR.serialized_pb
    assert client_mem.DESCRIPTOR.serialized_pb == memory_pb2.DESCRIPTOR.serialized_pb


@pytest.mark.parametrize(
    ("source", "inside"),
    [
        (ROOT, "ctxd_sidecar/api/ctxd/v1"),
        (ROOT / "clients" / "python", "ctxd_client/_api/ctxd/v1"),
    ],
    ids=["server", "python-client"],
)
def test_wheels_ship_the_protos(source, inside, tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for proto in PROTOS:
        assert f"{inside}/{proto.name}" in names
