"""Prompt assembly: template, frozen prefix, and when the prefix is rebuilt."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from ctxd_sidecar.config import PromptConfig, SkillsConfig
from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.core.plan import Binding, BindingKind, Planner, RunOutcome
from ctxd_sidecar.core.prompt.assemble import PromptAssembler, Template, builtin_template
from ctxd_sidecar.core.skills import SkillCatalogue
from tests.support.mcp_skills_server import command_line, write_skill

TTL = 1200.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def skills_dir(tmp_path) -> Path:
    root = tmp_path / "skills"
    write_skill(
        root,
        "prompts",
        "review",
        "Read the diff first.",
        description="Review code",
        when_to_use="a pull request is ready",
    )
    write_skill(root, "resources", "deploy", "Run the deploy script.", description="Deploy")
    return root


@pytest.fixture
async def catalogue(skills_dir):
    cat = SkillCatalogue(
        SkillsConfig(
            servers=f"local={command_line(skills_dir)}",
            connect_timeout=30,
            call_timeout=10,
            refresh_interval=0,
            max_backoff=0.5,
        )
    )
    await cat.start()
    yield cat
    await cat.stop()


def prefix_of(rendered) -> str:
    return rendered.text[: rendered.prefix_end]


# -- template -------------------------------------------------------------------------------


def test_template_blocks_comments_and_order():
    tpl = Template.parse(
        "{{!-- a comment with {{plan}} inside --}}Base.\n\n{{ instruction }}\n\n"
        "{{! short }}{{skills}}\n\n  \n\nTail text {{summary}}\n\n{{plan}}\n\nClosing."
    )
    assert tpl.prefix == ("Base.", "{{ instruction }}", "{{skills}}")
    assert tpl.tail == ("Tail text {{summary}}", "{{plan}}", "Closing.")
    assert builtin_template().tail == ("{{summary}}", "{{plan}}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Hello {{name}}", "unknown placeholder {{name}}"),
        ("{{plan}}\n\n{{skills}}", "{{skills}} must come before"),
        ("{{summary}} and {{loaded_skills}}", "must come before"),
        ("Broken {{plan", "unbalanced"),
    ],
)
def test_template_errors(text, message):
    with pytest.raises(ValueError) as err:
        Template.parse(text)
    assert message in str(err.value)


def test_bad_template_file_fails_config(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text("{{nope}}")
    with pytest.raises(ValueError, match="prompt.template_file: unknown placeholder"):
        load_config(env={}, overrides={"prompt.template_file": str(bad)})
    with pytest.raises(ValueError, match="cannot read"):
        load_config(env={}, overrides={"prompt.template_file": str(tmp_path / "missing.md")})


async def test_sections_and_empty_blocks(tmp_path):
    tpl = tmp_path / "t.md"
    tpl.write_text("Agent {{agent}}.\n\n{{instruction}}\n\n{{skills}}\n\n{{summary}}\n\n{{plan}}\n")
    assembler = PromptAssembler(PromptConfig(template_file=str(tpl), instruction="Be brief."))
    bare = await assembler.render("c1")
    assert bare.text == "Agent root.\n\nBe brief.\n"
    assert bare.prefix_end == len(bare.text)
    plan = Planner().create("Ship", ["a"])
    full = await assembler.render("c1", "helper", summary="Summary: done x.", plan=plan)
    assert full.text == (
        "Agent helper.\n\nBe brief.\n\nSummary: done x.\n\nPlan (0/1 done): Ship\n[~] s1. a\n"
    )
    assert prefix_of(full) == "Agent helper.\n\nBe brief.\n"
    assert full.prefix_hash == hashlib.sha256(prefix_of(full).encode()).hexdigest()


# -- the frozen prefix ----------------------------------------------------------------------


async def test_prefix_identical_across_50_renders(catalogue):
    clock = FakeClock()
    assembler = PromptAssembler(PromptConfig(prefix_ttl=TTL), catalogue, clock=clock)
    refs = (await catalogue.load([], "review")).refs
    planner = Planner()
    plan = planner.create("Review PR 12", [f"step {n}" for n in range(10)])
    first = await assembler.render("ctx", loaded=refs, plan=plan)
    assert first.rebuilt
    prefix = prefix_of(first)
    assert "- review: Review code (use when: a pull request is ready)" in prefix
    assert "### Skill: review\n---\nname: review" in prefix and "Read the diff first." in prefix
    assert "Plan (" not in prefix

    seen_tails = set()
    for turn in range(50):
        clock.advance(30)  # a turn every 30 s: never idle long enough
        if turn % 5 == 0:
            run = Binding(BindingKind.RUN, f"r{turn}")
            current = next(i for i in plan.items if i.status.value == "in_progress")
            plan = planner.update(plan, current.id, bind=run)
            plan = planner.report_run(plan, run, RunOutcome.SUCCEEDED).plan
        summary = f"Summary of earlier conversation:\n- fact {turn}"
        rendered = await assembler.render("ctx", loaded=refs, summary=summary, plan=plan)
        assert not rendered.rebuilt
        assert rendered.prefix_hash == first.prefix_hash
        assert rendered.prefix_end == first.prefix_end
        assert prefix_of(rendered) == prefix
        tail = rendered.text[rendered.prefix_end :]
        assert f"- fact {turn}" in tail and plan.render() in tail
        seen_tails.add(tail)
    assert len(seen_tails) == 50


async def test_catalogue_change_rebuilds_at_once(catalogue, skills_dir):
    clock = FakeClock()
    assembler = PromptAssembler(PromptConfig(prefix_ttl=TTL), catalogue, clock=clock)
    before = await assembler.render("ctx")
    assert not (await assembler.render("ctx")).rebuilt

    write_skill(skills_dir, "prompts", "triage", "Sort issues.", description="Triage issues")
    await catalogue.refresh()
    after = await assembler.render("ctx")
    assert after.rebuilt and after.prefix_hash != before.prefix_hash
    assert "- triage: Triage issues" in prefix_of(after)
    assert not (await assembler.render("ctx")).rebuilt


async def test_server_going_down_rebuilds_at_once(catalogue, skills_dir):
    assembler = PromptAssembler(PromptConfig(prefix_ttl=TTL), catalogue, clock=FakeClock())
    before = await assembler.render("ctx")
    assert "- review:" in prefix_of(before)
    (skills_dir / "crash").touch()
    await catalogue.refresh()
    deadline = asyncio.get_running_loop().time() + 60
    while catalogue.connected():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    down = await assembler.render("ctx")
    assert down.rebuilt and "- review:" not in prefix_of(down)
    assert down.prefix_hash != before.prefix_hash


async def test_loaded_set_change_rebuilds_at_once(catalogue):
    assembler = PromptAssembler(PromptConfig(prefix_ttl=TTL), catalogue, clock=FakeClock())
    empty = await assembler.render("ctx")
    loaded = await catalogue.load([], "deploy")
    with_skill = await assembler.render("ctx", loaded=loaded.refs)
    assert with_skill.rebuilt and "### Skill: deploy" in prefix_of(with_skill)
    unloaded, _ = catalogue.unload(loaded.refs, "deploy")
    again = await assembler.render("ctx", loaded=unloaded)
    assert again.rebuilt and again.prefix_hash == empty.prefix_hash


async def test_rebuilt_only_after_idle_ttl(tmp_path):
    tpl = tmp_path / "system.md"
    tpl.write_text("Version one.\n\n{{plan}}\n")
    clock = FakeClock()
    assembler = PromptAssembler(PromptConfig(template_file=str(tpl), prefix_ttl=TTL), clock=clock)
    first = await assembler.render("ctx", plan="Plan (0/0 done): g")
    assert prefix_of(first) == "Version one.\n"

    tpl.write_text("Version two.\n\n{{plan}}\n")
    # In use every 19 minutes for an hour: the edit waits, the prefix holds.
    for _ in range(4):
        clock.advance(TTL - 60)
        rendered = await assembler.render("ctx")
        assert not rendered.rebuilt and rendered.prefix_hash == first.prefix_hash
    # Idle longer than the TTL: rebuilt, and the edited template lands.
    clock.advance(TTL + 1)
    late = await assembler.render("ctx")
    assert late.rebuilt and prefix_of(late) == "Version two.\n"
    assert late.prefix_hash != first.prefix_hash
    # An unchanged prefix rebuilt after idleness keeps its hash.
    clock.advance(TTL + 1)
    same = await assembler.render("ctx")
    assert same.rebuilt and same.prefix_hash == late.prefix_hash


async def test_broken_template_edit_keeps_the_last_good_one(tmp_path):
    tpl = tmp_path / "system.md"
    tpl.write_text("Good.\n")
    clock = FakeClock()
    assembler = PromptAssembler(PromptConfig(template_file=str(tpl), prefix_ttl=10), clock=clock)
    await assembler.render("ctx")
    tpl.write_text("{{broken")
    clock.advance(11)
    rendered = await assembler.render("ctx")
    assert rendered.rebuilt and rendered.text == "Good.\n"


async def test_prefix_per_context_and_agent_lru_bounded(tmp_path):
    tpl = tmp_path / "t.md"
    tpl.write_text("You are {{agent}}.\n\n{{plan}}\n")
    clock = FakeClock()
    assembler = PromptAssembler(
        PromptConfig(template_file=str(tpl), prefix_cache_max=2), clock=clock
    )
    root = await assembler.render("c1")
    helper = await assembler.render("c1", "helper")
    assert prefix_of(root) == "You are root.\n" and prefix_of(helper) == "You are helper.\n"
    assert not (await assembler.render("c1")).rebuilt
    await assembler.render("c2")  # evicts the least recently used: (c1, helper)
    assert len(assembler) == 2
    assert (await assembler.render("c1", "helper")).rebuilt  # evicts (c1, root)
    assert assembler.forget("c1") == 1 and len(assembler) == 1  # (c2, root) is left
    assert (await assembler.render("c1")).rebuilt


async def test_edited_loaded_skill_is_reported_not_swapped(catalogue, skills_dir):
    assembler = PromptAssembler(PromptConfig(prefix_ttl=TTL), catalogue, clock=FakeClock())
    refs = (await catalogue.load([], "deploy")).refs
    before = await assembler.render("ctx", loaded=refs)
    assert before.changed_skills == ()
    write_skill(skills_dir, "resources", "deploy", "Deploy v2 steps.", description="Deploy")
    assert await catalogue.check(refs) == ["deploy"]
    after = await assembler.render("ctx", loaded=refs)
    # The context still holds the body it loaded; the change is reported.
    assert after.changed_skills == ("deploy",)
    assert not after.rebuilt and after.prefix_hash == before.prefix_hash
    assert "Run the deploy script." in prefix_of(after)
