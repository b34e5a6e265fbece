"""gRPC adapter for the plan, preflight, skills and prompt RPCs of
``ctxd.v1.ContextService`` (a mixin of
:class:`sidecar.server.context_service.ContextServicer`).

Converts protobuf to domain calls and back; the rules live in
:mod:`sidecar.core.contexts.planning`, :mod:`sidecar.core.contexts.skillset`,
:mod:`sidecar.core.plan`, :mod:`sidecar.core.skills` and
:mod:`sidecar.core.prompt`.
"""

from __future__ import annotations

import logging

from sidecar.api.ctxd.v1 import context_pb2 as pb
from sidecar.core.contexts.model import TOOL, Msg
from sidecar.core.contexts.planning import Planning
from sidecar.core.contexts.service import ContextService
from sidecar.core.contexts.skillset import SkillSet, TurnSkills
from sidecar.core.errors import InvalidArgument
from sidecar.core.plan import Binding, BindingKind, PlanItemSpec, PlanStatus, RunOutcome
from sidecar.core.prompt import PromptAssembler
from sidecar.core.skills import SkillCatalogue
from sidecar.server.context_convert import plan_to_pb

log = logging.getLogger(__name__)

_STATUS_FROM_PB = {
    pb.PLAN_ITEM_STATUS_PENDING: PlanStatus.PENDING,
    pb.PLAN_ITEM_STATUS_IN_PROGRESS: PlanStatus.IN_PROGRESS,
    pb.PLAN_ITEM_STATUS_DONE: PlanStatus.DONE,
    pb.PLAN_ITEM_STATUS_BLOCKED: PlanStatus.BLOCKED,
    pb.PLAN_ITEM_STATUS_SKIPPED: PlanStatus.SKIPPED,
}
_BINDING_FROM_PB = {
    pb.BINDING_KIND_RUN: BindingKind.RUN,
    pb.BINDING_KIND_SUBAGENT: BindingKind.SUBAGENT,
    pb.BINDING_KIND_TASK: BindingKind.TASK,
}
_OUTCOME_FROM_PB = {
    pb.RUN_OUTCOME_SUCCEEDED: RunOutcome.SUCCEEDED,
    pb.RUN_OUTCOME_FAILED: RunOutcome.FAILED,
    pb.RUN_OUTCOME_CANCELLED: RunOutcome.CANCELLED,
}


def _binding(b: pb.PlanBinding, field: str) -> Binding:
    kind = _BINDING_FROM_PB.get(b.kind)
    if kind is None:
        raise InvalidArgument(f"{field}.kind", "must be RUN, SUBAGENT or TASK")
    return Binding(kind, b.id)


def _spec(s: pb.PlanItemSpec) -> PlanItemSpec:
    return PlanItemSpec(title=s.title, detail=s.detail, id=s.id)


def _plan_pb(plan) -> pb.Plan | None:
    return plan_to_pb(plan) if plan is not None else None


def _expected(request) -> int | None:
    return request.expected_version if request.HasField("expected_version") else None


def _plan_edit(request: pb.UpdatePlanRequest):
    """The request's operation as a function of (planner, plan), validated up front."""
    which = request.WhichOneof("op")
    if which == "create":
        c = request.create
        specs = [_spec(s) for s in c.items]
        return lambda planner, _plan: planner.create(c.goal, specs)
    if which == "update":
        u = request.update
        status = None
        if u.status != pb.PLAN_ITEM_STATUS_UNSPECIFIED:
            status = _STATUS_FROM_PB.get(u.status)
            if status is None:
                raise InvalidArgument("update.status", f"unknown plan item status {u.status}")
        bind = _binding(u.bind, "update.bind") if u.HasField("bind") else None
        kwargs = {
            "status": status,
            "note": u.note if u.HasField("note") else None,
            "title": u.title if u.HasField("title") else None,
            "detail": u.detail if u.HasField("detail") else None,
            "bind": bind,
        }
        return lambda planner, plan: planner.update(plan, u.item_id, **kwargs)
    if which == "insert":
        i = request.insert
        if not i.HasField("item"):
            raise InvalidArgument("insert.item", "must describe the new item")
        spec = _spec(i.item)
        return lambda planner, plan: planner.insert(plan, spec, i.position)
    if which == "move":
        m = request.move
        return lambda planner, plan: planner.move(plan, m.item_id, m.position)
    if which == "clear":
        return lambda planner, plan: planner.clear(plan)
    raise InvalidArgument("op", "set one of create, update, insert, move or clear")


def turn_texts(messages: list[Msg]) -> list[str]:
    """Where a turn may reference ``@skill:<name>``: every message's own text
    (tool results carry outside content and are not read)."""
    return [m.text for m in messages if m.kind != TOOL and m.text]


class PlanSkillsRpcs:
    """UpdatePlan, ReportRun, SetPreflight, ListSkills, LoadSkill, UnloadSkill,
    RenderPrompt, and the ``@skill:`` preload of AppendTurn."""

    planning: Planning
    skillset: SkillSet
    catalogue: SkillCatalogue
    prompts: PromptAssembler

    def _init_plan_rpcs(self, config, service: ContextService) -> None:
        self.planning = Planning(service, config.plan)
        self.catalogue = SkillCatalogue(config.skills)
        self.prompts = PromptAssembler(config.prompt, self.catalogue)
        self.skillset = SkillSet(service, self.catalogue, self.prompts)

    async def _start_plan_rpcs(self) -> None:
        # Serving never waits for skills servers: they connect in the background.
        await self.catalogue.start(wait=False)

    async def _stop_plan_rpcs(self) -> None:
        await self.skillset.stop()
        await self.catalogue.stop()

    async def _turn_skills(self, context_id: str, messages: list[Msg]) -> TurnSkills:
        return await self.skillset.preload_turn(context_id, turn_texts(messages))

    # -- plan and preflight ------------------------------------------------------------------
    async def UpdatePlan(self, request: pb.UpdatePlanRequest, context) -> pb.UpdatePlanResponse:
        edit = _plan_edit(request)
        result = await self.planning.update_plan(
            request.context_id, edit, expected_version=_expected(request)
        )
        return pb.UpdatePlanResponse(version=result.version, plan=_plan_pb(result.plan))

    async def ReportRun(self, request: pb.ReportRunRequest, context) -> pb.ReportRunResponse:
        if not request.HasField("binding"):
            raise InvalidArgument("binding", "must name the run, subagent or task")
        binding = _binding(request.binding, "binding")
        outcome = _OUTCOME_FROM_PB.get(request.outcome)
        if outcome is None:
            raise InvalidArgument("outcome", "must be SUCCEEDED, FAILED or CANCELLED")
        result = await self.planning.report_run(
            request.context_id, binding, outcome, request.reason
        )
        return pb.ReportRunResponse(
            version=result.version, plan=_plan_pb(result.plan), item_id=result.item_id
        )

    async def SetPreflight(
        self, request: pb.SetPreflightRequest, context
    ) -> pb.SetPreflightResponse:
        version = await self.planning.set_preflight(
            request.context_id, request.verdict_json, expected_version=_expected(request)
        )
        return pb.SetPreflightResponse(version=version)

    # -- skills ------------------------------------------------------------------------------
    async def ListSkills(self, request: pb.ListSkillsRequest, context) -> pb.ListSkillsResponse:
        return pb.ListSkillsResponse(
            skills=[
                pb.SkillInfo(
                    name=e.name,
                    description=e.description,
                    when_to_use=e.when_to_use,
                    source=e.source,
                    available=e.available,
                )
                for e in self.skillset.entries()
            ]
        )

    async def LoadSkill(self, request: pb.LoadSkillRequest, context) -> pb.LoadSkillResponse:
        change = await self.skillset.load(request.context_id, request.name)
        ref = change.ref
        return pb.LoadSkillResponse(
            version=change.version,
            skill=pb.SkillRef(name=ref.name, hash=ref.hash) if ref else None,
            truncated=change.truncated,
        )

    async def UnloadSkill(self, request: pb.UnloadSkillRequest, context) -> pb.UnloadSkillResponse:
        change = await self.skillset.unload(request.context_id, request.name)
        return pb.UnloadSkillResponse(version=change.version, unloaded=change.changed)

    # -- prompt ------------------------------------------------------------------------------
    async def RenderPrompt(
        self, request: pb.RenderPromptRequest, context
    ) -> pb.RenderPromptResponse:
        out = await self.skillset.render(request.context_id, request.agent)
        p = out.prompt
        return pb.RenderPromptResponse(
            prompt=p.text,
            prefix_hash=p.prefix_hash,
            prefix_end=p.prefix_end,
            prefix_rebuilt=p.rebuilt,
            version=out.version,
        )
