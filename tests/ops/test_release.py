"""The release check: every artifact builds, carries its metadata and a
LICENSE, passes ``twine check``, installs into a fresh environment and runs.

Offline: the Python artifacts are built without isolation (setuptools from
this environment) and installed with ``--no-deps`` into a fresh venv that
sees this environment's site-packages for their dependencies; the npm
tarball is installed with ``--offline`` from npm's cache, which the
TypeScript client's ``npm ci`` fills.
"""

from __future__ import annotations

import email
import json
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import grpc
import pytest

import ctxd_sidecar
from tests.conftest import free_port, wait_serving

ROOT = Path(__file__).resolve().parents[2]
PY_CLIENT = ROOT / "clients" / "python"
TS_CLIENT = ROOT / "clients" / "typescript"
VERSION = ctxd_sidecar.__version__

pytestmark = pytest.mark.xdist_group("release")


def run(cmd: list[str], cwd: Path = ROOT, timeout: float = 600, **kw) -> str:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    )
    return r.stdout


def client_version() -> str:
    text = (PY_CLIENT / "ctxd_client" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


def test_one_version_everywhere():
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]\d+|rc\d+)?", VERSION)
    assert client_version() == VERSION
    assert json.loads((TS_CLIENT / "package.json").read_text())["version"] == VERSION
    ts = (TS_CLIENT / "src" / "version.ts").read_text()
    assert f'VERSION = "{VERSION}"' in ts
    assert f"## [{VERSION}]" in (ROOT / "CHANGELOG.md").read_text()
    out = run([sys.executable, "-m", "ctxd_sidecar", "--version"])
    assert out.strip() == f"ctxd {VERSION}"


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, Path]:
    """sdist and wheel of the server and of the Python client (wheels built from the sdists)."""
    out = tmp_path_factory.mktemp("dist")
    for name, src in (("server", ROOT), ("client", PY_CLIENT)):
        run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out / name), str(src)]
        )
    found = {
        "server-sdist": next((out / "server").glob("ctxd_sidecar-*.tar.gz")),
        "server-wheel": next((out / "server").glob("ctxd_sidecar-*.whl")),
        "client-sdist": next((out / "client").glob("ctxd_client-*.tar.gz")),
        "client-wheel": next((out / "client").glob("ctxd_client-*.whl")),
    }
    return found


def wheel_metadata(wheel: Path) -> tuple[email.message.Message, list[str]]:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        return email.message_from_string(z.read(meta).decode()), names


def test_twine_check_passes_on_every_python_artifact(dists):
    out = run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dists.values())])
    assert out.count("PASSED") == 4


@pytest.mark.parametrize("which", ["server", "client"])
def test_metadata_license_classifiers_urls_and_version(dists, which):
    meta, names = wheel_metadata(dists[f"{which}-wheel"])
    assert meta["Version"] == VERSION
    assert meta["License-Expression"] == "Apache-2.0"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    classifiers = meta.get_all("Classifier")
    assert "Development Status :: 3 - Alpha" in classifiers
    assert any(c.startswith("Programming Language :: Python :: 3.1") for c in classifiers)
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert {"Homepage", "Source", "Issues", "Changelog"} <= set(urls)
    with tarfile.open(dists[f"{which}-sdist"]) as tar:
        top = tar.getnames()[0].split("/")[0]
        assert f"{top}/LICENSE" in tar.getnames()
        assert f"{top}/README.md" in tar.getnames()


def test_server_wheel_installs_only_ctxd_packages(dists):
    _meta, names = wheel_metadata(dists["server-wheel"])
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"ctxd_sidecar", "ctxd_plugins"}
    with zipfile.ZipFile(dists["server-wheel"]) as z:
        info = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        listed = set(z.read(info).decode().split())
    assert listed and all(name.startswith("ctxd_") for name in listed), listed
    # the protos and prompts ship with the server
    assert any(n.endswith("api/ctxd/v1/context.proto") for n in names)
    assert "ctxd_sidecar/prompts/system.md" in names
    # and everything the ctxd ui page serves (it works offline)
    for asset in ("templates/base.html", "templates/transcript.html", "static/ui.js"):
        assert f"ctxd_sidecar/ui/{asset}" in names, asset


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory, dists) -> Path:
    """A new venv holding the built wheels; dependencies seen through this
    environment's site-packages (appended after its own, so the wheels win)."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    purelib = run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip()
    (Path(purelib) / "deps-from-the-suite.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            str(dists["server-wheel"]),
            str(dists["client-wheel"]),
        ]
    )
    return venv


def test_installed_server_and_client_run(fresh_venv, tmp_path):
    py = fresh_venv / "bin" / "python"
    where = run(
        [
            str(py),
            "-c",
            "import ctxd_sidecar, ctxd_client, ctxd_plugins; "
            "print(ctxd_sidecar.__file__, ctxd_client.__file__, ctxd_plugins.__file__)",
        ]
    )
    assert all(str(fresh_venv) in p for p in where.split()), where
    assert (
        run(
            [
                str(
                    fresh_venv / "bin" / "ctxd",
                ),
                "--version",
            ]
        ).strip()
        == f"ctxd {VERSION}"
    )
    # The built-ins are registered through the installed wheel's entry points.
    assert "lmdb" in run([str(fresh_venv / "bin" / "ctxd"), "plugins"])
    address = f"127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [
            str(fresh_venv / "bin" / "ctxd"),
            "serve",
            "--listen",
            address,
            "--store",
            f"lmdb://{tmp_path / 'data'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        code = (
            "import sys, ctxd_client\n"
            "from ctxd_client import Client\n"
            f"assert ctxd_client.__version__ == {VERSION!r}\n"
            f"with Client({address!r}) as c:\n"
            "    c.append_turn('r', [{'user': {'text': 'hello'}}])\n"
            "    print(len(c.slice('r')))\n"
        )
        with grpc.insecure_channel(address) as channel:
            wait_serving(channel, 30, server)
        health = run([str(fresh_venv / "bin" / "ctxd"), "health", "--address", address])
        assert health.strip() == f"SERVING {address}"
        assert run([str(py), "-c", code]).strip() == "1"
    finally:
        server.terminate()
        assert server.wait(30) == 0, server.stderr.read().decode()[-2000:]


@pytest.fixture(scope="module")
def npm_tarball(tmp_path_factory) -> Path:
    from tests.support.node_helpers import npm_ci, require_node_and_npm

    require_node_and_npm()
    npm_ci(TS_CLIENT)
    out = tmp_path_factory.mktemp("npm")
    run(["npm", "pack", "--pack-destination", str(out)], cwd=TS_CLIENT)
    return next(out.glob("ctxd-client-*.tgz"))


def test_npm_tarball_carries_license_metadata_and_build(npm_tarball):
    assert npm_tarball.name == f"ctxd-client-{VERSION}.tgz"
    with tarfile.open(npm_tarball) as tar:
        names = set(tar.getnames())
        pkg = json.load(tar.extractfile("package/package.json"))
    assert {
        "package/LICENSE",
        "package/README.md",
        "package/dist/index.js",
        "package/dist/index.d.ts",
        "package/dist/version.js",
    } <= names
    assert not any(n.startswith("package/src/") or "/test/" in n for n in names)
    assert pkg["license"] == "Apache-2.0" and pkg["version"] == VERSION
    assert pkg["repository"]["url"] and pkg["homepage"] and pkg["bugs"]["url"]


def test_npm_tarball_installs_and_runs(npm_tarball, tmp_path, start_sidecar, store_uri_for):
    """The tarball unpacked as npm installs it, its dependencies seen from the
    ones the client's ``npm ci`` installed (offline, as for the wheels)."""
    app = tmp_path / "app"
    modules = app / "node_modules"
    modules.mkdir(parents=True)
    (app / "package.json").write_text('{"name": "app", "private": true, "type": "module"}')
    with tarfile.open(npm_tarball) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (tmp_path / "unpacked" / "package").rename(modules / "ctxd-client")
    deps = json.loads((modules / "ctxd-client" / "package.json").read_text())["dependencies"]
    for name in deps:
        link = modules / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(TS_CLIENT / "node_modules" / name, target_is_directory=True)
    sc = start_sidecar(store_uri_for("memory"))
    script = (
        'import { CtxdClient, VERSION } from "ctxd-client";\n'
        f'const c = new CtxdClient({{ address: "{sc.address}" }});\n'
        'await c.appendTurn("n", [{ user: { text: "hi" } }]);\n'
        'const s = await c.slice("n");\n'
        "console.log(VERSION, s.messages.length, JSON.parse(JSON.stringify(s)).version);\n"
    )
    (app / "main.mjs").write_text(script)
    out = run(["node", "main.mjs"], cwd=app, timeout=60)
    assert out.split() == [VERSION, "1", "1"]  # the slice serialises, its version a string
