"""Plugins acting around compaction, installed through their entry point:
redaction before text leaves for a summariser model, a note after a
compaction commits, and a failing hook that loses nothing. Real sidecars,
the OpenAI-compatible summariser against a loopback server."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.support.compaction import append, assistant, openai_settings, tool, user
from tests.support.fake_openai import FakeOpenAI

EXAMPLE = Path(__file__).parents[2] / "examples" / "compaction-hooks" / "ctxd_guard.py"
SECRET = "AKIAABCDEFGHIJKLMNOP"

BROKEN = """
from ctxd_sidecar.plugin.spec import hookimpl


@hookimpl
def ctxd_redact(context_id, text):
    raise RuntimeError("broken redactor")


@hookimpl
def ctxd_compacted(context_id, compaction, kept):
    raise RuntimeError("broken anchor")
"""


def install(site: Path, name: str, source: str) -> None:
    """A distribution on ``site`` with one ``ctxd.plugins`` entry point."""
    (site / f"{name}.py").write_text(source)
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[ctxd.plugins]\n{name} = {name}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    yield site
    for name in ("ctxd_guard", "ctxd_broken"):
        sys.modules.pop(name, None)


def test_the_example_installs_as_a_package_and_registers_its_entry_point(tmp_path):
    """``pip install ./examples/compaction-hooks`` works as the docs say (offline)."""
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "-q"]
    build = ["wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(EXAMPLE.parent)]
    r = subprocess.run(pip + build, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    install = ["install", "--no-deps", "--no-index", "--target", str(site)]
    r = subprocess.run(
        pip + install + [str(w) for w in wheels.glob("*.whl")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    code = (
        "from ctxd_sidecar.plugin.manager import plugin_manager\n"
        "print(sorted(name for name, _ in plugin_manager().list_name_plugin()))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "ctxd_guard" in r.stdout


def conversation(sc, cid: str) -> None:
    append(sc, cid, user("deploy billing"), assistant("", ("c1", "shell")))
    append(
        sc,
        cid,
        tool("c1", "shell", {"stdout": f"using key {SECRET} and password=hunter2 ok"}),
        assistant("deployed"),
    )
    for i in range(3):
        append(sc, cid, user(f"then step {i}"), assistant(f"done {i}"))


def test_redaction_and_re_anchoring_through_the_example_plugin(start_sidecar, store_uri_for, site):
    install(site, "ctxd_guard", EXAMPLE.read_text())
    with FakeOpenAI() as server:
        sc = start_sidecar(store_uri_for("lmdb"), **openai_settings(server))
        conversation(sc, "g")
        plan = sc.contexts.PlanCompaction(pb.PlanCompactionRequest(context_id="g", keep_last=2))
        assert SECRET not in plan.excerpt and "hunter2" not in plan.excerpt
        assert "[redacted]" in plan.excerpt
        r = sc.contexts.Compact(pb.CompactRequest(context_id="g", keep_last=2))
        assert r.compacted
        sent = "\n".join(req.user for req in server.requests)
        assert SECRET not in sent and "hunter2" not in sent and "[redacted]" in sent
        ctx = sc.contexts.GetContext(pb.GetContextRequest(context_id="g")).context
        # The stored transcript is untouched; the summary ctxd builds is redacted.
        assert SECRET not in ctx.summary.SerializeToString().decode("utf-8", "replace")
        note = ctx.messages[-1]
        assert note.WhichOneof("kind") == "note"
        assert note.note.text.startswith(
            f"Compacted {r.folded} earlier messages ({r.compaction.id})"
        )
        assert "then step 2" in note.note.text
        assert ctx.version == r.version + 1


def test_a_failing_hook_loses_neither_the_compaction_nor_the_turn(
    start_sidecar, store_uri_for, site, caplog
):
    install(site, "ctxd_broken", BROKEN)
    caplog.set_level(logging.WARNING, "ctxd_sidecar.plugin.manager")
    sc = start_sidecar(store_uri_for("lmdb"))
    conversation(sc, "b")
    r = sc.contexts.Compact(pb.CompactRequest(context_id="b", keep_last=2))
    assert r.compacted
    assert append(sc, "b", user("still here")).version == r.version + 1
    messages = [rec.getMessage() for rec in caplog.records]
    assert "redact hook failed" in messages and "compacted hook failed" in messages
