"""Third-party store plugins: the example package (examples/store-plugin)
pip-installed for real and found through its ``ctxd.plugins`` entry point,
its own conformance tests run against the installed copy, and a sidecar
serving from it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctxd_sidecar.api.ctxd.v1 import memory_pb2
from ctxd_sidecar.plugin.manager import available_schemes, open_store, plugin_manager

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "store-plugin"
BUILT_IN_SCHEMES = ["lmdb", "memory", "postgres", "postgresql", "s3"]


@pytest.fixture(scope="session")
def dirstore_site(tmp_path_factory) -> Path:
    """The example plugin installed by pip (once per session) into a
    directory of its own, from a copy so the build leaves the tree clean."""
    source = tmp_path_factory.mktemp("dirstore-src") / "store-plugin"
    shutil.copytree(
        EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    site = tmp_path_factory.mktemp("dirstore-site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(site),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return site


@pytest.fixture
def with_dirstore(dirstore_site, monkeypatch) -> Path:
    """The installed plugin importable (and its entry point visible) for one test."""
    monkeypatch.syspath_prepend(str(dirstore_site))
    yield dirstore_site
    for name in [m for m in sys.modules if m.partition(".")[0] == "ctxd_dirstore"]:
        del sys.modules[name]


def _load_example_tests():
    spec = importlib.util.spec_from_file_location(
        "ctxd_dirstore_example_tests", EXAMPLE / "tests" / "test_dirstore.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_example = _load_example_tests()


# The example's own test classes (what its README tells an author to run),
# here against the pip-installed copy.
@pytest.mark.usefixtures("with_dirstore")
class TestInstalledDirStore(_example.TestDirStore):
    pass


@pytest.mark.usefixtures("with_dirstore")
class TestInstalledDirStoreWithoutLocking(_example.TestDirStoreWithoutLocking):
    pass


def test_installed_plugin_is_found_through_its_entry_point(with_dirstore, tmp_path):
    (entry_point,) = [
        ep for ep in importlib.metadata.entry_points(group="ctxd.plugins") if ep.name == "dir"
    ]
    assert entry_point.value == "ctxd_dirstore"
    pm = plugin_manager()
    assert available_schemes(pm) == sorted(["dir", *BUILT_IN_SCHEMES])
    store = open_store(f"dir://{tmp_path / 'data'}", pm)
    try:
        assert Path(sys.modules[type(store).__module__].__file__).is_relative_to(with_dirstore)
        version = store.put("k", b"value")
        assert store.get("k").version == version
        assert store.list("") == ["k"]
        assert sorted(os.listdir(tmp_path / "data" / "data")) == [b"k".hex()]
    finally:
        store.close()


def test_unknown_scheme_names_every_installed_one(with_dirstore):
    with pytest.raises(ValueError) as err:
        open_store("nosuch://x", plugin_manager())
    assert str(err.value) == (
        "no store plugin serves scheme 'nosuch' "
        "(installed: dir, lmdb, memory, postgres, postgresql, s3)"
    )


def test_without_the_package_its_scheme_is_unknown():
    with pytest.raises(
        ValueError, match=r"scheme 'dir' \(installed: lmdb, memory, postgres, postgresql, s3\)"
    ):
        open_store("dir:///tmp/x", plugin_manager())


@pytest.mark.parametrize(
    "uri, needle",
    [
        ("dir://", "needs a path"),
        (
            "dir:///srv/ctxd?lockng=false",
            "unknown dir store option 'lockng' (known options: locking)",
        ),
        ("dir:///srv/ctxd?locking=maybe", "must be true or false"),
    ],
)
def test_a_malformed_uri_is_the_plugins_clear_error(with_dirstore, uri, needle):
    with pytest.raises(ValueError) as err:
        open_store(uri, plugin_manager())
    assert needle in str(err.value)


def test_ctxd_plugins_lists_the_installed_scheme(dirstore_site):
    env = {**os.environ, "PYTHONPATH": str(dirstore_site)}
    out = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "plugins"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    lines = out.splitlines()
    stores = lines[1 : lines.index("summarisers (name: plugin)")]
    assert lines[0] == "stores (scheme: plugin)"
    assert stores == [
        "  dir: ctxd_dirstore",
        "  lmdb: ctxd_plugins.lmdb_store",
        "  memory: ctxd_plugins.memory_store",
        "  postgres: ctxd_plugins.postgres",
        "  postgresql: ctxd_plugins.postgres",
        "  s3: ctxd_plugins.s3",
    ]
    assert "  extractive: ctxd_plugins.extractive_summariser" in lines
    assert "  summariser.openai: ctxd_plugins.openai_summariser" in lines
    assert "schemes: dir, lmdb, memory, postgres, postgresql, s3" in lines


def test_ctxd_serve_uses_the_plugin_store_across_restarts(dirstore_site, spawn_sidecar, tmp_path):
    env = {"PYTHONPATH": str(dirstore_site)}
    args = ("--store", f"dir://{tmp_path / 'ctxd'}")
    first = spawn_sidecar(*args, env=env)
    memory = first.running().memory
    created = memory.Set(memory_pb2.SetRequest(key="notes/plan", value_json='{"step": 1}'))
    memory.Set(
        memory_pb2.SetRequest(
            key="notes/plan", value_json='{"step": 2}', expected_version=created.record.version
        )
    )
    assert first.terminate() == 0

    second = spawn_sidecar(*args, env=env)
    record = second.running().memory.Get(memory_pb2.GetRequest(key="notes/plan")).record
    assert record.value_json == '{"step": 2}'
