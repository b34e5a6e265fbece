"""Skills from real MCP servers (tests/support/mcp_skills_server.py over stdio and HTTP)."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctxd_sidecar.config import SkillsConfig
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.core.errors import LimitExceeded, NotFound, Unavailable
from ctxd_sidecar.core.skills import (
    SkillCatalogue,
    SkillRef,
    cap_body,
    find_references,
    parse_front_matter,
    refs_from_list,
    refs_to_list,
    split_description,
)
from tests.support.mcp_skills_server import command_line, write_skill

#: Generous: a cold Python + mcp import on a busy 2-core machine.
CONNECT_TIMEOUT = 30.0


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def skills_dir(tmp_path) -> Path:
    root = tmp_path / "skills"
    write_skill(
        root,
        "prompts",
        "review",
        "Read the diff.\n\nComment on risks.",
        description="Review code",
        when_to_use="a pull request is ready",
    )
    write_skill(
        root, "resources", "deploy", "Run the deploy script.", description="Deploy a service"
    )
    write_skill(
        root,
        "skillmd",
        "pdf",
        "Extract text with pdftotext.",
        description="Work with PDF files",
        when_to_use="the user sends a PDF",
    )
    write_skill(root, "mime", "style", "Use the house style.", description="Writing style guide")
    return root


@pytest.fixture
async def open_catalogue():
    made: list[SkillCatalogue] = []

    async def make(*servers: str, **settings) -> SkillCatalogue:
        options = {
            "connect_timeout": CONNECT_TIMEOUT,
            "call_timeout": 10.0,
            "refresh_interval": 0.0,
        }
        cat = SkillCatalogue(SkillsConfig(servers=";".join(servers), **(options | settings)))
        made.append(cat)
        await cat.start()
        return cat

    yield make
    for cat in made:
        await cat.stop()


async def eventually(predicate, timeout: float = 60.0) -> None:
    """Wait until ``predicate()`` holds (state changes made by background tasks)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.05)


# -- pure helpers ---------------------------------------------------------------------------


def test_find_references_grammar():
    text = (
        "Use @skill:deploy. Then @skill:pdf-tools and @skill:a_b.c, again @skill:deploy; "
        "not @skill: or @skill:-x ; @skill:x:y stops at the colon, @skill:git/commit at the slash"
    )
    assert find_references(text) == ["deploy", "pdf-tools", "a_b.c", "x", "git"]


def test_front_matter_and_description_split():
    text = (
        '---\nname: pdf\ndescription: >\n  Work with\n  PDFs\nwhen_to_use: "a PDF arrives"\n'
        "---\nbody"
    )
    assert parse_front_matter(text) == {
        "name": "pdf",
        "description": "Work with PDFs",
        "when_to_use": "a PDF arrives",
    }
    assert parse_front_matter("---\nno closing fence") == {}
    assert parse_front_matter("plain body") == {}
    assert split_description("Deploys things. Use when: a release is tagged") == (
        "Deploys things.",
        "a release is tagged",
    )
    assert split_description("Reviews.  WHEN TO USE:  PRs") == ("Reviews.", "PRs")


def test_cap_body_cuts_on_a_character_boundary():
    text, truncated = cap_body("é" * 10, 5)
    assert truncated
    head = text.split("\n\n[skill body truncated")[0]
    assert head == "éé" and "skills.max_body_bytes = 5 bytes" in text
    assert cap_body("short", 5) == ("short", False)


def test_refs_round_trip():
    refs = [SkillRef("a", "1" * 64), SkillRef("b", "2" * 64)]
    assert refs_from_list(refs_to_list(refs)) == refs


def test_server_list_config():
    cfg = load_config(
        env={"CTXD_SKILLS_SERVERS": "docs=https://mcp.example/mcp; local = skills-srv --dir '/a b'"}
    )
    specs = cfg.skills.server_specs()
    assert [(s.name, s.url, s.command) for s in specs] == [
        ("docs", "https://mcp.example/mcp", ()),
        ("local", "", ("skills-srv", "--dir", "/a b")),
    ]
    for bad in ("nameonly", "a=x;a=y", "bad name=x", "q=cmd 'unclosed"):
        with pytest.raises(ValueError, match="skills.servers"):
            load_config(env={}, overrides={"skills.servers": bad})


# -- discovery and bodies -------------------------------------------------------------------


async def test_discovery_over_stdio(open_catalogue, skills_dir):
    cat = await open_catalogue(f"local={command_line(skills_dir)}")
    assert cat.connected() == frozenset({"local"})
    assert cat.generation == 1
    entries = {e.name: e for e in cat.entries()}
    # Not skills: the skill:// index, a supporting file, a text/plain resource,
    # a prompt with a required argument.
    assert list(entries) == ["deploy", "pdf", "review", "style"]
    assert entries["review"].source == "local:prompt"
    assert (entries["review"].description, entries["review"].when_to_use) == (
        "Review code",
        "a pull request is ready",
    )
    assert entries["deploy"].locator == "skill://deploy"
    # skill://pdf/SKILL.md is listed without a description: read from its front matter.
    assert entries["pdf"].locator == "skill://pdf/SKILL.md"
    assert (entries["pdf"].description, entries["pdf"].when_to_use) == (
        "Work with PDF files",
        "the user sends a PDF",
    )
    assert entries["style"].locator == "docs://guides/style.md"
    assert all(e.available for e in entries.values())
    assert entries["pdf"].to_dict() == {
        "name": "pdf",
        "description": "Work with PDF files",
        "when_to_use": "the user sends a PDF",
        "source": "local:resource",
        "available": True,
    }


async def test_body_fetch_hash_and_cache(open_catalogue, skills_dir):
    cat = await open_catalogue(f"local={command_line(skills_dir)}")
    for name, kind in [("review", "prompts"), ("deploy", "resources"), ("style", "mime")]:
        body = await cat.fetch(name)
        expected = (skills_dir / kind / f"{name}.md").read_text()
        assert body.text == expected and not body.truncated
        assert body.hash == sha(expected) == cat.current_hash(name)
        assert cat.bodies.get(body.hash) == expected
    with pytest.raises(NotFound):
        await cat.fetch("nope")


async def test_edited_skill_shows_as_changed(open_catalogue, skills_dir):
    cat = await open_catalogue(f"local={command_line(skills_dir)}")
    first = await cat.load([], "deploy")
    refs = first.refs
    assert refs == [SkillRef("deploy", sha((skills_dir / "resources/deploy.md").read_text()))]
    assert cat.stale(refs) == []

    write_skill(skills_dir, "resources", "deploy", "Run deploy v2.", description="Deploy a service")
    assert await cat.check(refs) == ["deploy"]
    assert cat.generation == 1, "a body edit is not a catalogue change"
    # The context still renders the body it loaded (cached by hash), flagged as changed.
    (resolved,) = await cat.resolve(refs)
    assert resolved.text.endswith("Run the deploy script.") and resolved.changed

    again = await cat.load(refs, "deploy")
    assert again.changed and again.ref.hash != refs[0].hash and len(again.refs) == 1
    assert cat.stale(again.refs) == []

    # A background refresh keeps the current hash of loaded skills up to date.
    write_skill(skills_dir, "resources", "deploy", "Run deploy v3.", description="Deploy a service")
    await cat.refresh()
    assert cat.stale(again.refs) == ["deploy"]


async def test_body_cap_and_loaded_cap(open_catalogue, skills_dir):
    write_skill(skills_dir, "prompts", "big", "x" * (40 * 1024), description="Too long")
    for n in range(8):
        write_skill(skills_dir, "prompts", f"k{n}", f"body {n}", description=f"skill {n}")
    cat = await open_catalogue(f"local={command_line(skills_dir)}")

    big = await cat.fetch("big")
    assert big.truncated and big.hash == sha(big.text)
    head, note = big.text.rsplit("\n\n", 1)
    assert len(head.encode()) == 32 * 1024
    assert note == "[skill body truncated to skills.max_body_bytes = 32768 bytes]"
    assert (await cat.load([], "big")).truncated

    refs: list[SkillRef] = []
    for n in range(8):
        refs = (await cat.load(refs, f"k{n}")).refs
    with pytest.raises(LimitExceeded) as err:
        await cat.load(refs, "review")
    assert err.value.limit == "skills.max_loaded" and err.value.value == 8
    # Re-loading one already loaded is not a ninth.
    assert len((await cat.load(refs, "k3")).refs) == 8
    # A reference past the cap is reported, never fatal.
    result = await cat.preload(refs, ["please use @skill:review"])
    assert result.refs == refs and result.loaded == []
    assert "skills.max_loaded" in result.failed["review"]
    kept, unloaded = cat.unload(refs, "k0")
    assert unloaded and len(kept) == 7
    assert cat.unload(kept, "k0") == (kept, False)


async def test_preload_references(open_catalogue, skills_dir):
    cat = await open_catalogue(f"local={command_line(skills_dir)}")
    result = await cat.preload([], ["Follow @skill:review and @skill:pdf.", "also @skill:ghost"])
    assert [r.name for r in result.loaded] == ["review", "pdf"]
    assert result.refs == result.loaded
    assert result.unknown == ["ghost"] and result.failed == {}
    # Already loaded with the current body: nothing to do.
    again = await cat.preload(result.refs, ["@skill:review"])
    assert again.loaded == [] and again.refs == result.refs


# -- servers that are down, die or are slow -----------------------------------------------


async def test_dead_servers_do_not_block(open_catalogue, skills_dir):
    quits = f"{sys.executable} -c 'import sys; sys.exit(0)'"
    cat = await asyncio.wait_for(
        open_catalogue(
            "gone=/nonexistent/ctxd-no-such-server",
            f"quits={quits}",
            f"local={command_line(skills_dir)}",
        ),
        timeout=CONNECT_TIMEOUT * 2,
    )
    status = {s["name"]: s for s in cat.servers()}
    assert status["gone"]["connected"] is False and status["gone"]["error"] == "command not found"
    assert status["quits"]["connected"] is False and status["quits"]["error"]
    assert "/nonexistent" not in str(status), "errors never carry paths"
    assert cat.connected() == frozenset({"local"})
    assert {e.name for e in cat.entries()} == {"deploy", "pdf", "review", "style"}
    # A refresh with servers down returns; they are retried, not waited on.
    await asyncio.wait_for(cat.refresh(), timeout=CONNECT_TIMEOUT * 2)
    assert cat.connected() == frozenset({"local"})


async def test_server_that_dies_marks_its_skills_unavailable(open_catalogue, skills_dir):
    cat = await open_catalogue(f"local={command_line(skills_dir)}", max_backoff=0.5)
    generation = cat.generation
    (skills_dir / "crash").touch()
    with pytest.raises(Unavailable):
        await cat.fetch("review")
    await eventually(lambda: not cat.connected())
    assert all(not e.available for e in cat.entries())
    assert {e.name for e in cat.entries()} == {"deploy", "pdf", "review", "style"}
    assert cat.generation == generation, "availability is tracked by connected(), not generation"
    with pytest.raises(Unavailable, match="not connected"):
        await cat.fetch("review")
    result = await cat.preload([], ["@skill:review"])
    assert result.loaded == [] and "review" in result.failed

    (skills_dir / "crash").unlink()
    await eventually(lambda: cat.connected() == frozenset({"local"}))
    assert all(e.available for e in cat.entries())
    assert (await cat.fetch("review")).text.startswith("---")


async def test_slow_server_times_out_and_recovers(open_catalogue, skills_dir):
    cat = await open_catalogue(
        f"local={command_line(skills_dir)}", call_timeout=0.5, max_backoff=0.5
    )
    (skills_dir / "delay").write_text("5")
    # wait_for would raise TimeoutError (not Unavailable) if the call hung.
    with pytest.raises(Unavailable, match="did not answer within 0.5s"):
        await asyncio.wait_for(cat.fetch("review"), timeout=4)
    # Its listing times out as well, so the server counts as down.
    await eventually(lambda: not cat.connected())
    assert not cat.get("review").available

    (skills_dir / "delay").unlink()
    await cat.refresh()
    await eventually(lambda: cat.connected() == frozenset({"local"}))
    assert (await cat.fetch("review")).hash == sha((skills_dir / "prompts/review.md").read_text())


async def test_catalogue_change_bumps_generation(open_catalogue, skills_dir):
    cat = await open_catalogue(f"local={command_line(skills_dir)}")
    assert cat.generation == 1
    assert await cat.refresh() == 1, "an unchanged listing is not a change"
    write_skill(skills_dir, "prompts", "triage", "Sort the issues.", description="Triage")
    assert await cat.refresh() == 2
    assert cat.get("triage").source == "local:prompt"
    write_skill(skills_dir, "prompts", "triage", "Sort.", description="Triage issues")
    assert await cat.refresh() == 3, "a new description is a change"


# -- streamable HTTP ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_server(skills_dir):
    port = free_port()
    script = Path(__file__).parents[1] / "support" / "mcp_skills_server.py"
    proc = subprocess.Popen([sys.executable, str(script), str(skills_dir), "--http", str(port)])
    deadline = time.monotonic() + CONNECT_TIMEOUT
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("test MCP server did not start") from None
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    proc.wait(timeout=10)


async def test_discovery_over_streamable_http(open_catalogue, http_server, skills_dir):
    cat = await open_catalogue(f"remote={http_server}")
    assert cat.connected() == frozenset({"remote"})
    assert [e.name for e in cat.entries()] == ["deploy", "pdf", "review", "style"]
    assert cat.get("pdf").source == "remote:resource"
    body = await cat.fetch("pdf")
    assert body.hash == sha((skills_dir / "skillmd/pdf.md").read_text())


async def test_first_server_wins_name_collisions(open_catalogue, skills_dir, tmp_path):
    other = tmp_path / "other"
    write_skill(other, "prompts", "review", "Another review.", description="Other review")
    write_skill(other, "prompts", "extra", "Extra.", description="Only here")
    cat = await open_catalogue(f"a={command_line(skills_dir)}", f"b={command_line(other)}")
    assert cat.get("review").server == "a" and cat.get("review").description == "Review code"
    assert cat.get("extra").server == "b"
