"""A context's loaded skills and its system prompt, over :class:`ContextService`.

Record kind ``skills`` (see :mod:`.ops`): ``refs`` = the whole loaded set
after the change, ``[[name, sha256], ...]``. Bodies are never stored; they
come from the :class:`~ctxd_sidecar.core.skills.SkillCatalogue` (cached by hash,
fetched again from the MCP server when needed).

Bodies are fetched *before* the context's lock is taken (a slow server never
holds the lock), then the loaded set is recomputed from the record under the
lock, so the cap and the set stay exact when calls race.

``@skill:<name>`` references in an appended turn are resolved here for the
turn (:class:`SkillSet` is the turn's :class:`~.turns.SkillResolver`): bodies
fetched within the turn's wait are loaded by the turn's own record, and a
load that takes longer commits on its own (:mod:`.turns`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ctxd_sidecar.core.contexts import validate
from ctxd_sidecar.core.contexts.events import ContextEvent
from ctxd_sidecar.core.contexts.model import ContextState, SkillRef
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.errors import CtxdError, InvalidArgument, LimitExceeded, NotFound
from ctxd_sidecar.core.prompt.assemble import PromptAssembler, RenderedPrompt
from ctxd_sidecar.core.skills import SkillCatalogue, SkillInfo, find_references

log = logging.getLogger(__name__)

#: Longest shutdown waits for loads still running (a slow server's are dropped).
STOP_WAIT = 1.0
#: Longest agent name accepted by RenderPrompt.
MAX_AGENT_CHARS = 128


def _record(refs: Iterable[Any]) -> dict[str, Any]:
    return {"op": "skills", "refs": [[r.name, r.hash] for r in refs]}


@dataclass(frozen=True)
class SkillChange:
    version: int
    ref: SkillRef | None = None
    truncated: bool = False
    changed: bool = False


@dataclass(frozen=True)
class Rendered:
    prompt: RenderedPrompt
    version: int


class SkillSet:
    """Skills loading and prompt rendering for contexts."""

    def __init__(
        self,
        contexts: ContextService,
        catalogue: SkillCatalogue,
        prompts: PromptAssembler,
    ) -> None:
        self.contexts = contexts
        self.catalogue = catalogue
        self.prompts = prompts
        self._tasks: set[asyncio.Task] = set()
        self._unlisten = contexts.feed.add_listener(self._on_event)

    async def stop(self) -> None:
        self._unlisten()
        pending = [t for t in self._tasks if not t.done()]
        if pending:
            _, late = await asyncio.wait(pending, timeout=STOP_WAIT)
            for t in late:
                t.cancel()

    def _on_event(self, event: ContextEvent, _state: ContextState | None) -> None:
        if event.kind == "deleted":
            self.prompts.forget(event.context_id)

    # -- catalogue -------------------------------------------------------------------------
    def entries(self) -> list[SkillInfo]:
        return self.catalogue.entries()

    # -- load / unload ---------------------------------------------------------------------
    def _check_cap(self, refs: list[SkillRef], name: str) -> None:
        limit = self.catalogue.config.max_loaded
        if all(r.name != name for r in refs) and len(refs) >= limit:
            raise LimitExceeded(
                "skills.max_loaded",
                limit,
                f"a context loads at most {limit} skills (skills.max_loaded); unload one first",
            )

    async def load(self, context_id: str, name: str) -> SkillChange:
        """Load (or re-load at its current hash) one skill; RESOURCE_EXHAUSTED past the cap."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument("name", "must name a skill")
        st = await self.contexts.get(context_id)
        if self.catalogue.get(name) is None:
            raise NotFound(f"no skill {name!r} in the catalogue (ListSkills shows it)")
        self._check_cap(list(st.skills), name)  # fail before asking the server
        body = await self.catalogue.fetch(name)
        ref = SkillRef(name, body.hash)
        changed = False

        def build(st: ContextState) -> dict[str, Any] | None:
            nonlocal changed
            refs = list(st.skills)
            self._check_cap(refs, name)
            index = next((i for i, r in enumerate(refs) if r.name == name), None)
            if index is None:
                refs.append(ref)
            elif refs[index].hash == ref.hash:
                return None
            else:
                changed = True
                refs[index] = ref
            return _record(refs)

        st, _ = await self.contexts.change(context_id, build, event="skills")
        return SkillChange(st.version, ref, body.truncated, changed)

    async def unload(self, context_id: str, name: str) -> SkillChange:
        """Remove one skill from the loaded set (no change when it was not loaded)."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument("name", "must name a skill")
        removed = False

        def build(st: ContextState) -> dict[str, Any] | None:
            nonlocal removed
            kept, removed = self.catalogue.unload(st.skills, name)
            return _record(kept) if removed else None

        st, _ = await self.contexts.change(context_id, build, event="skills")
        return SkillChange(st.version, changed=removed)

    # -- @skill: references (the turn's SkillResolver) --------------------------------------
    def references(self, texts: list[str]) -> tuple[list[str], list[str]]:
        """Names ``texts`` reference, split into (known, unknown) by the catalogue."""
        names: list[str] = []
        for text in texts:
            names.extend(n for n in find_references(text) if n not in names)
        known = [n for n in names if self.catalogue.get(n) is not None]
        return known, [n for n in names if n not in known]

    async def resolve(self, loaded: list[SkillRef], texts: list[str]) -> list[SkillRef]:
        """Fetch the referenced bodies that are new or changed (never fatal)."""
        pre = await self.catalogue.preload(list(loaded), texts)
        if pre.failed:
            log.info("referenced skills not loaded", extra={"skills": pre.failed})
        return [SkillRef(r.name, r.hash) for r in pre.loaded]

    def apply(self, refs: list[SkillRef], wanted: list[SkillRef]) -> list[SkillRef]:
        """Merge ``wanted`` into ``refs`` in place, within ``skills.max_loaded``;
        return the refs that changed (re-applied to the current set under the
        lock: another change may have landed since the bodies were fetched)."""
        changed: list[SkillRef] = []
        for ref in wanted:
            index = next((i for i, r in enumerate(refs) if r.name == ref.name), None)
            if index is None:
                if len(refs) >= self.catalogue.config.max_loaded:
                    continue
                refs.append(ref)
            elif refs[index].hash == ref.hash:
                continue
            else:
                refs[index] = ref
            changed.append(ref)
        return changed

    def load_later(self, context_id: str, pending: asyncio.Future) -> None:
        """Commit a resolution that outlasted the turn's wait as its own change."""
        task = asyncio.create_task(self._load_later(context_id, pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _load_later(self, context_id: str, pending: asyncio.Future) -> None:
        try:
            wanted = await pending
            if not wanted:
                return

            def build(st: ContextState) -> dict[str, Any] | None:
                refs = list(st.skills)
                return _record(refs) if self.apply(refs, wanted) else None

            await self.contexts.change(context_id, build, event="skills")
        except CtxdError as exc:
            log.warning(
                "referenced skills not loaded", extra={"context": context_id, "error": str(exc)}
            )
        except Exception as exc:  # noqa: BLE001 - a reference must never fail the turn
            log.warning(
                "referenced skills not loaded",
                extra={"context": context_id, "error": type(exc).__name__},
            )

    # -- prompt ----------------------------------------------------------------------------
    async def render(self, context_id: str, agent: str = "") -> Rendered:
        validate.bounded(agent, "agent", MAX_AGENT_CHARS)
        st = await self.contexts.get(context_id)
        # Copied without awaiting: the record may change during the render.
        version = st.version
        loaded = list(st.skills)
        summary = st.summary.render()
        plan = st.plan.render() if st.plan is not None else ""
        prompt = await self.prompts.render(
            context_id, agent, loaded=loaded, summary=summary, plan=plan
        )
        return Rendered(prompt, version)
