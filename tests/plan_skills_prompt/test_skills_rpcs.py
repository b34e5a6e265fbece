"""Skills over gRPC against a real MCP server over stdio
(tests/support/mcp_skills_server.py): ListSkills, LoadSkill/UnloadSkill, ``@skill:``
preload on AppendTurn, caps, changed bodies, a dead or slow server, restarts."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.support.mcp_skills_server import command_line, write_skill

#: Generous: a cold Python + mcp import on a busy 2-core machine.
CONNECT_TIMEOUT = 30.0


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def body_of(path: Path) -> str:
    """The body the catalogue hashes for a resource skill (the file as served)."""
    return path.read_text()


@pytest.fixture
def skills_dir(tmp_path) -> Path:
    root = tmp_path / "skills"
    write_skill(
        root,
        "prompts",
        "deploy",
        "Run the deploy script.\n\nThen check the dashboards.",
        description="Deploy a service",
        when_to_use="shipping a release",
    )
    write_skill(root, "resources", "review", "Read every diff line.", description="Review code")
    write_skill(root, "skillmd", "triage", "Label the issue.", description="Triage issues")
    write_skill(root, "mime", "oncall", "Page the owner.", description="On-call duty")
    return root


def lmdb_uri(tmp_path) -> str:
    return f"lmdb://{tmp_path / 'data'}?map_size=64MiB"


def wait_for(predicate, timeout: float = CONNECT_TIMEOUT, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def skills(stub) -> dict[str, pb.SkillInfo]:
    return {s.name: s for s in stub.ListSkills(pb.ListSkillsRequest()).skills}


def start(start_sidecar, uri: str, root: Path, min_skills: int = 4, **settings):
    sc = start_sidecar(
        uri,
        skills__servers=f"t={command_line(root)}",
        skills__connect_timeout=CONNECT_TIMEOUT,
        skills__refresh_interval=0,
        **settings,
    )
    wait_for(lambda: len(skills(sc.contexts)) >= min_skills, what="the skills catalogue")
    return sc


def domain(sc):
    return sc.extra["handle"].sidecar.domain


def refresh(sc) -> None:
    handle = sc.extra["handle"]
    handle.call(domain(sc).catalogue.refresh(CONNECT_TIMEOUT), timeout=CONNECT_TIMEOUT + 5)


def say(stub, text: str, cid: str = "conv-1", **kw) -> pb.AppendTurnResponse:
    return stub.AppendTurn(
        pb.AppendTurnRequest(context_id=cid, messages=[pb.Message(user=pb.UserMessage(text=text))]),
        **kw,
    )


def loaded(stub, cid: str = "conv-1") -> dict[str, str]:
    ctx = stub.GetContext(pb.GetContextRequest(context_id=cid)).context
    return {s.name: s.hash for s in ctx.skills}


def test_list_skills_discovers_prompts_and_resources(start_sidecar, tmp_path, skills_dir):
    sc = start(start_sidecar, lmdb_uri(tmp_path), skills_dir)
    found = skills(sc.contexts)
    assert set(found) == {"deploy", "review", "triage", "oncall"}
    assert found["deploy"].description == "Deploy a service"
    assert found["deploy"].when_to_use == "shipping a release"
    assert found["deploy"].source == "t:prompt"
    assert found["review"].source == "t:resource"
    assert found["triage"].description == "Triage issues"  # from the body's front matter
    assert all(s.available for s in found.values())


def test_skill_references_in_a_turn_are_loaded(start_sidecar, tmp_path, skills_dir):
    sc = start(start_sidecar, lmdb_uri(tmp_path), skills_dir)
    stub = sc.contexts
    r = say(stub, "Ship it with @skill:deploy, then @skill:review. Also @skill:nosuch.")
    assert list(r.unknown_skills) == ["nosuch"]
    got = {s.name: s.hash for s in r.loaded_skills}
    assert set(got) == {"deploy", "review"}
    assert got["review"] == sha(body_of(skills_dir / "resources" / "review.md"))
    # The turn and the skills it loads are one versioned change.
    assert r.version == 1
    ctx = stub.GetContext(pb.GetContextRequest(context_id="conv-1")).context
    assert ctx.version == 1 and {s.name: s.hash for s in ctx.skills} == got
    assert loaded(stub) == got

    # Referenced again with nothing changed: nothing to load, one version for the turn.
    r = say(stub, "again @skill:deploy")
    assert list(r.loaded_skills) == [] and list(r.unknown_skills) == []
    assert r.version == 2

    # An assistant or system message references skills too; tool results do not.
    r = stub.AppendTurn(
        pb.AppendTurnRequest(
            context_id="conv-1",
            messages=[
                pb.Message(
                    assistant=pb.AssistantMessage(
                        text="I will follow @skill:triage",
                        tool_calls=[pb.ToolCall(id="c1", name="x", arguments_json="{}")],
                    )
                ),
                pb.Message(tool=pb.ToolResult(call_id="c1", name="x", text="see @skill:oncall")),
            ],
        )
    )
    assert [s.name for s in r.loaded_skills] == ["triage"]
    assert set(loaded(stub)) == {"deploy", "review", "triage"}


def test_load_unload_and_caps(start_sidecar, tmp_path, skills_dir):
    for n in range(8):
        write_skill(skills_dir, "prompts", f"extra{n}", f"Extra skill {n}.", description=f"x{n}")
    write_skill(skills_dir, "prompts", "huge", "word " * 400, description="Too long")
    sc = start(
        start_sidecar, lmdb_uri(tmp_path), skills_dir, min_skills=13, skills__max_body_bytes=1024
    )
    stub = sc.contexts
    v = say(stub, "hello").version

    r = stub.LoadSkill(pb.LoadSkillRequest(context_id="conv-1", name="huge"))
    assert r.truncated and r.version == v + 1
    assert len(sc.extra["handle"].call(cached_body(sc, r.skill.hash)).encode()) <= 1024 + 200

    for n in range(7):
        r = stub.LoadSkill(pb.LoadSkillRequest(context_id="conv-1", name=f"extra{n}"))
        assert r.skill.name == f"extra{n}" and not r.truncated
    assert len(loaded(stub)) == 8
    version = r.version

    with pytest.raises(grpc.RpcError) as err:
        stub.LoadSkill(pb.LoadSkillRequest(context_id="conv-1", name="extra7"))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "skills.max_loaded" in err.value.details()
    # A reference past the cap is neither loaded nor unknown, and the turn is kept.
    r = say(stub, "use @skill:extra7")
    assert list(r.loaded_skills) == [] and list(r.unknown_skills) == []
    assert r.version == version + 1
    version = r.version
    # Re-loading one already loaded at the same hash is not a change.
    r = stub.LoadSkill(pb.LoadSkillRequest(context_id="conv-1", name="extra0"))
    assert r.version == version

    r = stub.UnloadSkill(pb.UnloadSkillRequest(context_id="conv-1", name="extra0"))
    assert r.unloaded and r.version == version + 1
    r = stub.UnloadSkill(pb.UnloadSkillRequest(context_id="conv-1", name="extra0"))
    assert not r.unloaded and r.version == version + 1
    stub.LoadSkill(pb.LoadSkillRequest(context_id="conv-1", name="extra7"))
    assert "extra7" in loaded(stub) and "extra0" not in loaded(stub)

    for name, code in (
        ("nosuch", grpc.StatusCode.NOT_FOUND),
        ("", grpc.StatusCode.INVALID_ARGUMENT),
    ):
        with pytest.raises(grpc.RpcError) as err:
            stub.LoadSkill(pb.LoadSkillRequest(context_id="conv-1", name=name))
        assert err.value.code() == code
    with pytest.raises(grpc.RpcError) as err:
        stub.UnloadSkill(pb.UnloadSkillRequest(context_id="conv-1", name=""))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as err:
        stub.LoadSkill(pb.LoadSkillRequest(context_id="missing", name="deploy"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def cached_body(sc, digest: str) -> str:
    """The body the catalogue cached under ``digest`` (read on the sidecar's loop)."""
    return domain(sc).catalogue.bodies.get(digest)


def test_changed_skill_shows_a_new_hash(start_sidecar, tmp_path, skills_dir):
    sc = start(start_sidecar, lmdb_uri(tmp_path), skills_dir)
    stub = sc.contexts
    first = {s.name: s.hash for s in say(stub, "@skill:review please").loaded_skills}["review"]

    write_skill(
        skills_dir, "resources", "review", "Read every diff line twice.", description="Review code"
    )
    # Explicit re-load fetches the body the server serves now.
    r = stub.LoadSkill(pb.LoadSkillRequest(context_id="conv-1", name="review"))
    assert r.skill.hash != first
    assert r.skill.hash == sha(body_of(skills_dir / "resources" / "review.md"))
    assert loaded(stub)["review"] == r.skill.hash
    second = r.skill.hash

    # After a catalogue refresh the change is known, so a reference re-loads it.
    write_skill(
        skills_dir, "resources", "review", "Read it three times.", description="Review code"
    )
    refresh(sc)
    r = say(stub, "again @skill:review")
    assert [(s.name, s.hash) for s in r.loaded_skills] == [
        ("review", sha(body_of(skills_dir / "resources" / "review.md")))
    ]
    assert loaded(stub)["review"] not in (first, second)


def test_a_dead_server_does_not_block_turns(start_sidecar, tmp_path, skills_dir):
    sc = start(start_sidecar, lmdb_uri(tmp_path), skills_dir)
    stub = sc.contexts
    say(stub, "hi")
    before = stub.RenderPrompt(pb.RenderPromptRequest(context_id="conv-1"))
    assert "deploy" in before.prompt[: before.prefix_end]
    (skills_dir / "crash").write_text("")
    r = say(stub, "use @skill:deploy", timeout=20)
    assert list(r.loaded_skills) == [] and list(r.unknown_skills) == []
    assert r.version == 2
    # Its skills stay listed, as unavailable.
    wait_for(lambda: not any(s.available for s in skills(stub).values()), what="skills unavailable")
    # The connected servers changed: the prefix is rebuilt at once, without its skills.
    after = stub.RenderPrompt(pb.RenderPromptRequest(context_id="conv-1"))
    assert after.prefix_rebuilt and after.prefix_hash != before.prefix_hash
    assert "deploy" not in after.prompt
    r = say(stub, "still @skill:review here", timeout=20)
    assert r.version == 3 and list(r.loaded_skills) == []
    with pytest.raises(grpc.RpcError) as err:
        stub.LoadSkill(pb.LoadSkillRequest(context_id="conv-1", name="review"))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert loaded(stub) == {}


def test_a_slow_server_does_not_hold_the_turn(start_sidecar, tmp_path, skills_dir):
    sc = start(start_sidecar, lmdb_uri(tmp_path), skills_dir, skills__call_timeout=60)
    stub = sc.contexts
    say(stub, "hi")
    (skills_dir / "delay").write_text("120")
    # The reply comes well before the server would answer.
    r = say(stub, "use @skill:deploy", timeout=15)
    assert r.version == 2 and list(r.loaded_skills) == []
    assert loaded(stub) == {}


def test_loaded_skills_survive_a_restart(start_sidecar, tmp_path, skills_dir):
    uri = lmdb_uri(tmp_path)
    sc = start(start_sidecar, uri, skills_dir)
    stub = sc.contexts
    say(stub, "@skill:deploy and @skill:review")
    stub.UnloadSkill(pb.UnloadSkillRequest(context_id="conv-1", name="deploy"))
    before = loaded(stub)
    version = stub.GetContext(pb.GetContextRequest(context_id="conv-1")).context.version
    sc.stop()

    again = start(start_sidecar, uri, skills_dir).contexts
    ctx = again.GetContext(pb.GetContextRequest(context_id="conv-1")).context
    assert (
        {s.name: s.hash for s in ctx.skills}
        == before
        == {"review": sha(body_of(skills_dir / "resources" / "review.md"))}
    )
    assert ctx.version == version
    # The body is fetched again for the prompt (bodies are never stored).
    prompt = again.RenderPrompt(pb.RenderPromptRequest(context_id="conv-1")).prompt
    assert "Read every diff line." in prompt
