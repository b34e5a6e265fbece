"""The docs site builds (``mkdocs build --strict``: internal links and
anchors checked, generated references filled in) and the README keeps what a
newcomer runs first: the Quick start commands and a first turn that works."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ctxd_sidecar.config import Config

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SERVE = "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/ctxd serve"
TEST = "./scripts/test.sh"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return out


def test_every_rpc_message_and_field_is_in_the_api_reference(site):
    from google.protobuf import descriptor_pool

    from ctxd_sidecar.api.ctxd.v1 import context_pb2, memory_pb2

    page = (site / "api" / "index.html").read_text()
    pool = descriptor_pool.Default()
    for module in (context_pb2, memory_pb2):
        fd = pool.FindFileByName(module.DESCRIPTOR.name)
        for service in fd.services_by_name.values():
            assert f"ctxd.v1.{service.name}" in page
            for method in service.methods:
                assert f"<code>{method.name}</code>" in page, method.full_name
        for message in fd.message_types_by_name.values():
            assert f'id="{message.full_name.replace(".", "-").lower()}"' in page, message.name
            for field in message.fields:
                assert f"<code>{field.name}</code>" in page, field.full_name
    # the comments themselves, not only the names
    assert "AppendTurn appends messages atomically" in page


def test_every_setting_is_in_the_configuration_reference(site):
    page = (site / "configuration" / "index.html").read_text()
    for name, info in Config.model_fields.items():
        table = info.annotation
        if isinstance(table, type) and hasattr(table, "model_fields"):
            for key in table.model_fields:
                assert f"<code>{name}.{key}</code>" in page, f"{name}.{key}"
                assert f"CTXD_{name.upper()}_{key.upper()}" in page
        else:
            assert f"<code>{name}</code>" in page, name
    assert "summariser.openai.base_url" in page  # a plugin's table
    assert "Seconds between sweeps of expired records" in page  # the schema's own words


def test_every_store_option_is_in_the_store_reference(site):
    """The page's options are those each built-in store really takes: the
    scheme's own refusal of an unknown option names the options it knows."""
    sys.path.insert(0, str(ROOT / "scripts" / "docs"))
    from store_options import STORES, field_comments, model_of, option_name

    from ctxd_sidecar.plugin.manager import each_result, open_store, plugin_manager

    page = (site / "choosing-a-store" / "index.html").read_text()
    documented = {scheme: model_of(path) for scheme, path, _ in STORES}
    documented["postgresql"] = documented["postgres"]  # the same plugin's other spelling
    served = {
        scheme
        for plugin, schemes in each_result(plugin_manager(), "ctxd_store_schemes")
        if plugin.startswith("ctxd_plugins")
        for scheme in schemes
    }
    assert served == set(documented)
    for scheme, model in documented.items():
        with pytest.raises(ValueError) as refused:
            open_store(f"{scheme}://somewhere/x?no_such_option=1")
        known = str(refused.value).split("known options: ", 1)[1].rstrip(")")
        names = sorted(option_name(n, i) for n, i in model.model_fields.items())
        assert known == (", ".join(names) or "none"), scheme  # as the URI spells them
        assert f"<code>{scheme}://</code>" in page or scheme == "postgresql"
        comments = field_comments(model)
        for name, info in model.model_fields.items():
            assert f"<code>{option_name(name, info)}</code>" in page, (scheme, name)
            assert comments.get(name), f"{scheme} option {name} has no #: comment"
    assert "URL of an S3-compatible server" in page  # the model's own words


def test_benchmark_figures_are_drawn_from_the_results_file(site):
    page = (site / "benchmarks" / "index.html").read_text()
    assert "docs/benchmarks/results.json" in page
    for chart in ("history-growth.svg", "whole-turn.svg", "floors.svg", "fidelity-decay.svg"):
        assert (site / "benchmarks" / chart).read_text().lstrip().startswith("<?xml")
        assert chart in page


def test_readme_is_short_and_keeps_the_quick_start():
    assert len(README.splitlines()) <= 220
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)\n```", quick, re.S)
    assert blocks == [SERVE, TEST]
    assert "pre-1.0" in README.lower() and "on-disk format" in README


def test_install_commands_name_what_a_clone_can_install():
    """Nothing is published yet: commands install from the clone."""
    texts = {p: p.read_text() for p in [ROOT / "README.md", *ROOT.glob("docs/**/*.md")]}
    texts.update({p: p.read_text() for p in ROOT.glob("clients/*/README.md")})
    for path, text in texts.items():
        for cmd in re.findall(r"(?:pip|npm) install [^\n`]*", text):
            assert not re.search(r"install (-\S+ )*'?ctxd-", cmd), f"{path}: {cmd}"
    assert "pip install ./clients/python" in README
    assert 'npm install "$(bash ~/ctxd/scripts/pack-ts-client.sh)"' in README
    assert "pip install '.[s3]'" in README
    assert "not yet published" in README.lower() or "nothing is published" in README.lower()


def test_the_readmes_first_turn_runs(start_sidecar, store_uri_for):
    sc = start_sidecar(store_uri_for("memory"))
    first_turn = README.split("## A first turn", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)\n```", first_turn, re.S)
    assert len(code.splitlines()) <= 12
    r = subprocess.run(
        [sys.executable, "-c", code.replace("127.0.0.1:50051", sc.address)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "clients" / "python")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["append", "1"]


def test_test_files_the_docs_name_exist():
    """A test module the docs point to is where they say: one moved without its
    mention is caught (paths of other projects' tests, named in the integration
    pages, have no namesake here and are left alone)."""
    ours = {p.name for p in (ROOT / "tests").rglob("test_*.py")}
    texts = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("clients/*/README.md")]
    stale = {
        (str(path.relative_to(ROOT)), named)
        for path in texts
        for named in re.findall(r"tests/[\w/]+\.py", path.read_text())
        if not (ROOT / named).exists() and Path(named).name in ours
    }
    assert not stale
