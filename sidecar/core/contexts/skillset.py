"""A context's loaded skills and its system prompt, over :class:`ContextService`.

Record kind ``skills`` (see :mod:`.ops`): ``refs`` = the whole loaded set
after the change, ``[[name, sha256], ...]``. Bodies are never stored; they
come from the :class:`~sidecar.core.skills.SkillCatalogue` (cached by hash,
fetched again from the MCP server when needed).

Bodies are fetched *before* the context's lock is taken (a slow server never
holds the lock), then the loaded set is recomputed from the record under the
lock, so the cap and the set stay exact when calls race.

``@skill:<name>`` references in an appended turn are loaded by a follow-up
change right after the turn commits (:meth:`SkillSet.preload_turn`). The turn
waits for that at most :data:`PRELOAD_WAIT` seconds: unknown names are known
at once from the catalogue, and a load that takes longer (a slow server)
finishes in the background and commits on its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sidecar.core.contexts import ops, validate
from sidecar.core.contexts.model import ContextState, SkillRef
from sidecar.core.contexts.service import ContextEvent, ContextService
from sidecar.core.errors import CtxdError, InvalidArgument, LimitExceeded, NotFound
from sidecar.core.prompt import PromptAssembler, RenderedPrompt
from sidecar.core.skills import SkillCatalogue, SkillInfo, find_references

log = logging.getLogger(__name__)

#: Longest an AppendTurn reply waits for the skills its messages reference.
PRELOAD_WAIT = 1.0
#: Longest shutdown waits for loads still running (a slow server's are dropped).
STOP_WAIT = 1.0
#: Longest agent name accepted by RenderPrompt.
MAX_AGENT_CHARS = 128


@ops.op("skills")
def _apply_skills(state: ContextState, rec: dict[str, Any]) -> None:
    state.skills = [SkillRef(str(n), str(h)) for n, h in rec.get("refs", ())]


def _record(refs: Iterable[Any]) -> dict[str, Any]:
    return {"op": "skills", "refs": [[r.name, r.hash] for r in refs]}


@dataclass(frozen=True)
class SkillChange:
    version: int
    ref: SkillRef | None = None
    truncated: bool = False
    changed: bool = False


@dataclass(frozen=True)
class TurnSkills:
    """What the ``@skill:`` references of one turn did."""

    #: The context's version after the load this reply waited for (0: nothing loaded).
    version: int = 0
    loaded: list[SkillRef] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


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
        self._unlisten = contexts.add_listener(self._on_event)

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

    # -- @skill: references ----------------------------------------------------------------
    async def preload_turn(self, context_id: str, texts: list[str]) -> TurnSkills:
        """Load the skills ``texts`` reference into the context (never fatal)."""
        names: list[str] = []
        for text in texts:
            names.extend(n for n in find_references(text) if n not in names)
        if not names:
            return TurnSkills()
        unknown = [n for n in names if self.catalogue.get(n) is None]
        if len(unknown) == len(names):
            return TurnSkills(unknown=unknown)
        task = asyncio.create_task(self._preload(context_id, texts))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            result = await asyncio.wait_for(asyncio.shield(task), PRELOAD_WAIT)
        except TimeoutError:
            return TurnSkills(unknown=unknown)
        if result is None:
            return TurnSkills(unknown=unknown)
        new_version, loaded = result
        return TurnSkills(new_version, loaded, unknown)

    async def _preload(
        self, context_id: str, texts: list[str]
    ) -> tuple[int, list[SkillRef]] | None:
        try:
            st = await self.contexts.get(context_id)
            pre = await self.catalogue.preload(list(st.skills), texts)
            if pre.failed:
                log.info(
                    "referenced skills not loaded",
                    extra={"context": context_id, "skills": pre.failed},
                )
            if not pre.loaded:
                return None
            wanted = {r.name: SkillRef(r.name, r.hash) for r in pre.loaded}
            loaded: list[SkillRef] = []

            def build(st: ContextState) -> dict[str, Any] | None:
                # Re-applied to the current set: another change may have landed meanwhile.
                refs = list(st.skills)
                loaded.clear()
                for name, ref in wanted.items():
                    index = next((i for i, r in enumerate(refs) if r.name == name), None)
                    if index is None:
                        if len(refs) >= self.catalogue.config.max_loaded:
                            continue
                        refs.append(ref)
                    elif refs[index].hash == ref.hash:
                        continue
                    else:
                        refs[index] = ref
                    loaded.append(ref)
                return _record(refs) if loaded else None

            st, _ = await self.contexts.change(context_id, build, event="skills")
            return st.version, list(loaded)
        except CtxdError as exc:
            log.warning(
                "referenced skills not loaded", extra={"context": context_id, "error": str(exc)}
            )
            return None
        except Exception:  # noqa: BLE001 - a reference must never fail the turn
            log.exception("referenced skills not loaded", extra={"context": context_id})
            return None

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
