"""RenderPrompt over gRPC: a prefix frozen per (context, agent), rebuilt after
``prompt.prefix_ttl`` of idleness (clock moved by the test) or at once when
the skills catalogue or the loaded set changes; forgotten on DeleteContext."""

from __future__ import annotations

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from tests.plan_skills_prompt.test_skills_rpcs import (
    domain,
    lmdb_uri,
    refresh,
    say,
    skills,
    start,
    wait_for,
)
from tests.support.mcp_skills_server import write_skill

TTL = 600.0


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def skills_dir(tmp_path):
    root = tmp_path / "skills"
    write_skill(root, "prompts", "deploy", "Run the deploy script.", description="Deploy a service")
    write_skill(root, "resources", "review", "Read every diff line.", description="Review code")
    return root


def render(stub, cid: str = "conv-1", agent: str = "") -> pb.RenderPromptResponse:
    return stub.RenderPrompt(pb.RenderPromptRequest(context_id=cid, agent=agent))


def with_clock(sc) -> Clock:
    clock = Clock()
    domain(sc).prompts.clock = clock
    return clock


def test_prefix_is_stable_across_turns_and_plan_changes(start_sidecar, tmp_path, skills_dir):
    sc = start(start_sidecar, lmdb_uri(tmp_path), skills_dir, min_skills=2, prompt__prefix_ttl=TTL)
    stub = sc.contexts
    clock = with_clock(sc)
    say(stub, "hello")
    first = render(stub)
    assert first.prefix_rebuilt
    assert "deploy: Deploy a service" in first.prompt
    prefix = first.prompt[: first.prefix_end]
    stub.UpdatePlan(
        pb.UpdatePlanRequest(
            context_id="conv-1",
            create=pb.PlanCreate(
                goal="g", items=[pb.PlanItemSpec(title=f"step {n}") for n in range(3)]
            ),
        )
    )
    for n in range(50):
        say(stub, f"turn {n}")
        if n % 10 == 0:
            stub.UpdatePlan(
                pb.UpdatePlanRequest(
                    context_id="conv-1", update=pb.PlanUpdate(item_id="s1", note=f"note {n}")
                )
            )
        clock.now += TTL / 2  # busy: every render counts as use
        r = render(stub)
        assert r.prefix_hash == first.prefix_hash
        assert not r.prefix_rebuilt
        assert r.prompt[: r.prefix_end] == prefix
        assert r.prefix_end == first.prefix_end
        assert f"note {n - n % 10}" in r.prompt[r.prefix_end :]  # the plan is in the tail
    version = stub.GetContext(pb.GetContextRequest(context_id="conv-1")).context.version
    assert r.version == version
    # A subagent has a frozen prefix of its own (the same text: the built-in
    # template does not name the agent); the root agent's stays frozen.
    assert render(stub, agent="reviewer").prefix_rebuilt
    assert not render(stub).prefix_rebuilt


def test_prefix_rebuilt_when_the_catalogue_changes(start_sidecar, tmp_path, skills_dir):
    sc = start(start_sidecar, lmdb_uri(tmp_path), skills_dir, min_skills=2)
    stub = sc.contexts
    say(stub, "hello")
    first = render(stub)
    assert not render(stub).prefix_rebuilt
    write_skill(skills_dir, "prompts", "triage", "Label it.", description="Triage issues")
    refresh(sc)
    wait_for(lambda: "triage" in skills(stub), what="the new skill")
    r = render(stub)
    assert r.prefix_rebuilt and r.prefix_hash != first.prefix_hash
    assert "triage: Triage issues" in r.prompt[: r.prefix_end]


def test_prefix_rebuilt_when_the_loaded_set_changes(start_sidecar, tmp_path, skills_dir):
    sc = start(start_sidecar, lmdb_uri(tmp_path), skills_dir, min_skills=2)
    stub = sc.contexts
    say(stub, "hello")
    first = render(stub)
    say(stub, "now @skill:review")
    r = render(stub)
    assert r.prefix_rebuilt and r.prefix_hash != first.prefix_hash
    assert "Read every diff line." in r.prompt[: r.prefix_end]
    stub.UnloadSkill(pb.UnloadSkillRequest(context_id="conv-1", name="review"))
    r = render(stub)
    assert r.prefix_hash == first.prefix_hash and "Read every diff line." not in r.prompt


def test_prefix_rebuilt_after_idle_ttl(start_sidecar, tmp_path):
    template = tmp_path / "system.md"
    template.write_text("Base rules v1.\n\n{{skills}}\n\n{{plan}}\n")
    sc = start_sidecar(
        lmdb_uri(tmp_path), prompt__template_file=str(template), prompt__prefix_ttl=TTL
    )
    stub = sc.contexts
    clock = with_clock(sc)
    say(stub, "hello")
    first = render(stub)
    assert first.prompt.startswith("Base rules v1.")
    # An edited template lands only at a rebuild: not while the conversation is busy...
    template.write_text("Base rules v2.\n\n{{skills}}\n\n{{plan}}\n")
    for _ in range(3):
        clock.now += TTL - 1
        r = render(stub)
        assert not r.prefix_rebuilt and r.prefix_hash == first.prefix_hash
    # ...but after it was idle longer than prefix_ttl.
    clock.now += TTL + 1
    r = render(stub)
    assert r.prefix_rebuilt and r.prefix_hash != first.prefix_hash
    assert r.prompt.startswith("Base rules v2.")


def test_render_errors_and_delete_forgets_the_prefix(start_sidecar, tmp_path):
    sc = start_sidecar(lmdb_uri(tmp_path))
    stub = sc.contexts
    prompts = domain(sc).prompts
    say(stub, "hello")
    render(stub)
    render(stub, agent="helper")
    root = render(stub, cid="root")
    assert root.version == 0 and root.prefix_end > 0
    assert len(prompts) == 3
    stub.DeleteContext(pb.DeleteContextRequest(context_id="conv-1"))
    wait_for(lambda: len(prompts) == 1, timeout=5, what="the prefix to be forgotten")
    for req, code in (
        (pb.RenderPromptRequest(context_id="conv-1"), grpc.StatusCode.NOT_FOUND),
        (pb.RenderPromptRequest(context_id="bad id!"), grpc.StatusCode.INVALID_ARGUMENT),
        (
            pb.RenderPromptRequest(context_id="root", agent="a" * 500),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    ):
        with pytest.raises(grpc.RpcError) as err:
            stub.RenderPrompt(req)
        assert err.value.code() == code
