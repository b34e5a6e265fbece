"""System-prompt assembly with a cache-stable, frozen prefix.

One template (``sidecar/ctxd_sidecar/prompts/system.md``, or ``prompt.template_file``)
assembles the base instruction, the skills catalogue, the loaded skill
bodies, the summary and the plan, most stable first.

**Why a frozen prefix.** Providers that cache prompts (Anthropic cache
breakpoints, OpenAI automatic prefix caching) key on the longest common
prefix, and the system prompt is the head of every request: touching it costs
a full cache miss on the next request, for the whole conversation behind it.
So the stable part is built once per (context, agent) - the agent is in the
key because a subagent shares its parent's context but has a prompt of its
own - and reused verbatim until one of these happens:

* the conversation was idle longer than ``prompt.prefix_ttl`` (default 20
  min, about as long as a provider cache survives). Idle time is measured
  between renders of this (context, agent), and every render counts as use:
  below a provider's cache lifetime a rebuild pays misses that buy nothing,
  above it a rebuild costs only freshness. This is when an edited template
  file (or a skill body evicted from memory and re-fetched) lands;
* the skills catalogue changed (:attr:`SkillCatalogue.generation`) or the
  set of connected MCP servers changed - at once, because a stale inventory
  makes the model deny or misuse a skill it has (a model that reads "no such
  skill" does not go looking, it answers without it);
* the context's loaded skill set (names and hashes) changed - at once,
  because a skill is loaded precisely so the model follows it now.

**What is frozen and what is not.** The prefix is every template block up to
the first one that uses ``{{summary}}`` or ``{{plan}}``: in the built-in
template the base instruction, the operator instruction, the catalogue and
the loaded skill bodies. The bodies belong there: they are the biggest part
of the prompt (up to 8 x 32 KiB), they change only when a skill is loaded or
unloaded (explicit and rare), and as part of the prefix they are cached with
it. The tail - summary, then plan - is rendered fresh every time and never
touches the prefix hash: the plan changes with every step, and the summary
changes only at a compaction, which rewrites the transcript after the system
prompt anyway (a miss regardless), so keeping it out lets the prefix survive
compactions.

:meth:`PromptAssembler.render` returns the text, the SHA-256 of the prefix
and where the prefix ends (in code points), so a runtime can place a cache
breakpoint there and see a miss coming when the hash changes.

Template grammar: ``{{ name }}`` placeholders (``instruction``, ``agent``,
``skills``, ``loaded_skills``, ``summary``, ``plan``), ``{{!-- comment --}}``
and ``{{! comment }}`` (never sent). Blocks are separated by blank lines; a
block that renders to nothing is dropped. ``summary`` and ``plan`` must come
after the other placeholders. Values are inserted verbatim.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ctxd_sidecar.config import PromptConfig
from ctxd_sidecar.core.prompt.template import FIELD_RE as _FIELD_RE
from ctxd_sidecar.core.prompt.template import (  # noqa: F401 - re-exported
    MAX_TEMPLATE_BYTES,
    STABLE_FIELDS,
    VOLATILE_FIELDS,
    Template,
    builtin_template,
    load_template,
)
from ctxd_sidecar.core.skills import ResolvedSkill, SkillCatalogue, SkillInfo, SkillRef

log = logging.getLogger(__name__)


def _fill(blocks: Sequence[str], values: Mapping[str, str]) -> str:
    out: list[str] = []
    for block in blocks:
        text = _FIELD_RE.sub(lambda m: values.get(m.group(1), ""), block)
        if text.strip():
            out.append(text.strip("\n"))
    return "\n\n".join(out)


def render_catalogue(entries: Sequence[SkillInfo]) -> str:
    """The skills block: available skills only, sorted by name."""
    usable = sorted((e for e in entries if e.available), key=lambda e: e.name)
    if not usable:
        return ""
    lines = [
        "## Skills",
        "Reference a skill as @skill:<name> to load its full instructions.",
    ]
    for entry in usable:
        line = f"- {entry.name}"
        if entry.description:
            line += f": {entry.description}"
        if entry.when_to_use:
            line += f" (use when: {entry.when_to_use})"
        lines.append(line)
    return "\n".join(lines)


def render_loaded(skills: Sequence[ResolvedSkill]) -> str:
    """The loaded-skills block: each body under its own heading, in load order."""
    if not skills:
        return ""
    parts = ["## Loaded skills\nFollow these instructions when they apply."]
    for skill in skills:
        body = (
            skill.text.strip()
            if skill.text is not None
            else "(Not available right now: the server offering this skill is not answering.)"
        )
        parts.append(f"### Skill: {skill.name}\n{body}")
    return "\n\n".join(parts)


class _Renderable(Protocol):
    def render(self) -> str: ...


def _as_text(value: _Renderable | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    return value.render().strip()


@dataclass(frozen=True)
class RenderedPrompt:
    #: The whole system prompt: ``text[:prefix_end]`` is the frozen prefix.
    text: str
    #: SHA-256 (hex) of the prefix; a change means the provider cache misses.
    prefix_hash: str
    #: Length of the prefix in code points.
    prefix_end: int
    #: True when this render rebuilt the prefix (the hash may still be the same).
    rebuilt: bool
    #: Loaded skills whose server now serves a different body than the one
    #: loaded (as far as the catalogue knows; see SkillCatalogue.stale).
    changed_skills: tuple[str, ...] = ()


@dataclass
class _Frozen:
    template: Template
    text: str
    digest: str
    fingerprint: tuple[Any, ...]
    last_used: float


class PromptAssembler:
    """Renders system prompts and keeps one frozen prefix per (context, agent), LRU-bounded."""

    def __init__(
        self,
        config: PromptConfig | None = None,
        catalogue: SkillCatalogue | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or PromptConfig()
        self.catalogue = catalogue
        self.clock = clock
        self._template = load_template(self.config.template_file)
        self._frozen: OrderedDict[tuple[str, str], _Frozen] = OrderedDict()

    def _current_template(self) -> Template:
        """Re-read an operator's template file (only on a rebuild, so edits land at
        the next one); a file that became unreadable or invalid keeps the last good one."""
        if self.config.template_file:
            try:
                self._template = load_template(self.config.template_file)
            except ValueError as exc:
                log.warning("prompt template not reloaded", extra={"error": str(exc)})
        return self._template

    def _fingerprint(self, loaded: Sequence[SkillRef]) -> tuple[Any, ...]:
        cat = self.catalogue
        if cat is None:
            return (0, frozenset(), tuple((r.name, r.hash) for r in loaded))
        return (cat.generation, cat.connected(), tuple((r.name, r.hash) for r in loaded))

    async def render(
        self,
        context_id: str,
        agent: str = "",
        *,
        loaded: Sequence[SkillRef] = (),
        summary: _Renderable | str | None = None,
        plan: _Renderable | str | None = None,
    ) -> RenderedPrompt:
        """The system prompt for ``(context_id, agent)``; see the module doc for the rules.

        ``loaded`` is the context's loaded skill set; ``summary`` and ``plan``
        are text or objects with ``render()`` (a Plan), None when absent.
        """
        key = (context_id, agent)
        now = self.clock()
        fingerprint = self._fingerprint(loaded)
        frozen = self._frozen.get(key)
        rebuilt = (
            frozen is None
            or frozen.fingerprint != fingerprint
            or now - frozen.last_used > self.config.prefix_ttl
        )
        if rebuilt:
            frozen = await self._build(agent, loaded, fingerprint, now)
            self._frozen[key] = frozen
            while len(self._frozen) > self.config.prefix_cache_max:
                self._frozen.popitem(last=False)
        assert frozen is not None
        frozen.last_used = now
        self._frozen.move_to_end(key)
        tail = _fill(frozen.template.tail, {"summary": _as_text(summary), "plan": _as_text(plan)})
        text = frozen.text + ("\n" + tail + "\n" if tail else "")
        return RenderedPrompt(
            text=text,
            prefix_hash=frozen.digest,
            prefix_end=len(frozen.text),
            rebuilt=rebuilt,
            changed_skills=tuple(self.catalogue.stale(loaded)) if self.catalogue else (),
        )

    async def _build(
        self, agent: str, loaded: Sequence[SkillRef], fingerprint: tuple[Any, ...], now: float
    ) -> _Frozen:
        template = self._current_template()
        cat = self.catalogue
        if cat is not None:
            entries = cat.entries()
            resolved = await cat.resolve(loaded)
        else:
            entries = []
            resolved = [ResolvedSkill(r.name, r.hash, None, None) for r in loaded]
        values = {
            "instruction": self.config.instruction.strip(),
            "agent": agent or "root",
            "skills": render_catalogue(entries),
            "loaded_skills": render_loaded(resolved),
        }
        prefix = _fill(template.prefix, values)
        prefix = prefix + "\n" if prefix else ""
        return _Frozen(
            template=template,
            text=prefix,
            digest=hashlib.sha256(prefix.encode("utf-8")).hexdigest(),
            fingerprint=fingerprint,
            last_used=now,
        )

    def forget(self, context_id: str) -> int:
        """Drop every frozen prefix of a context (it was deleted); returns how many."""
        keys = [k for k in self._frozen if k[0] == context_id]
        for key in keys:
            del self._frozen[key]
        return len(keys)

    def __len__(self) -> int:
        return len(self._frozen)
