"""A LangChain agent middleware that gives the transcript to ctxd: ``CtxdContextMiddleware``.

``create_agent`` keeps the conversation in the graph state's ``messages``,
and the checkpointer writes that whole list at every step: storage grows
with the square of the conversation. ``SummarizationMiddleware`` trims it,
and the trimmed messages are gone. With this middleware instead, before
each model call:

1. the messages added since the last call (the user's input, the model's
   answer, tool results) are appended to ctxd as one turn, idempotently
   (the key is made of their ids, so a replayed step appends nothing);
2. when ctxd says the conversation passed its threshold it is compacted:
   by the sidecar's summariser, or by ``summary_model`` (the agent's own
   model) through PlanCompaction and ApplyCompaction (a compaction that the
   sidecar's automatic one beat to these messages counts as done);
3. the graph's ``messages`` are replaced by ctxd's slice (the summary as a
   system message, then the kept messages, ids ``ctxd-m12``), which the
   model is then called with.

So ctxd holds the whole transcript (FULL view, ExpandCompaction), the model
sees the summary and the recent tail, and the checkpoint holds only the
slice. After the agent finishes, its last answer is appended the same way.
The conversation is the thread: context id ``prefix + thread_id``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from langchain.agents.middleware.types import AgentMiddleware, AgentState
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from langgraph.config import get_config
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from ctxd_client import AsyncClient, Client
from ctxd_client.integrations._compaction import acompact, compact
from ctxd_client.integrations._ids import context_id as encode_id

#: Ids of messages that came from ctxd's slice (not new to it).
ID_PREFIX = "ctxd-"


def _new(messages: list[AnyMessage]) -> list[AnyMessage]:
    return [m for m in messages if not (m.id or "").startswith(ID_PREFIX)]


def _key(new: list[AnyMessage]) -> str:
    ids = "\n".join(m.id or json.dumps(m.content, sort_keys=True) for m in new)
    return "lc-" + hashlib.sha256(ids.encode()).hexdigest()[:40]


def _message(m: Any) -> AnyMessage:
    """A ctxd slice message as a LangChain message (id ``ctxd-<id>``)."""
    mid = ID_PREFIX + m.id
    kind = m.WhichOneof("kind")
    if kind == "user":
        return HumanMessage(content=m.user.text, id=mid)
    if kind == "assistant":
        calls = [
            {"id": c.id, "name": c.name, "args": json.loads(c.arguments_json or "{}")}
            for c in m.assistant.tool_calls
        ]
        return AIMessage(content=m.assistant.text, tool_calls=calls, id=mid)
    if kind == "tool":
        text = m.tool.json if m.tool.WhichOneof("content") == "json" else m.tool.text
        status = "error" if m.tool.is_error else "success"
        return ToolMessage(
            content=text, tool_call_id=m.tool.call_id, name=m.tool.name, status=status, id=mid
        )
    if kind == "system":
        return SystemMessage(content=m.system.text, id=mid)
    return HumanMessage(content="[note] " + m.note.text, id=mid)


class CtxdContextMiddleware(AgentMiddleware):
    """ctxd as the keeper of a ``create_agent`` conversation."""

    def __init__(
        self,
        client: Client | AsyncClient | str,
        *,
        prefix: str = "",
        model: str = "",
        model_window: int = 0,
        keep_last: int = 0,
        summariser: str = "",
        summary_model: Any = None,
    ) -> None:
        """``client``: a :class:`Client` (``invoke``), an :class:`AsyncClient`
        (``ainvoke``), or the address (either opened as needed). ``model`` /
        ``model_window`` set the window compaction measures against;
        ``keep_last`` the messages a compaction keeps; ``summariser`` a
        sidecar summariser plugin, or ``summary_model`` a LangChain chat model
        that writes the summary itself."""
        super().__init__()
        self._address = client if isinstance(client, str) else client.address
        self._sync = client if isinstance(client, Client) else None
        self._async = client if isinstance(client, AsyncClient) else None
        self.prefix = prefix
        self.model = model
        self.model_window = model_window
        self.keep_last = keep_last
        self.summariser = summariser
        self.summary_model = summary_model

    def context_id(self) -> str:
        """The conversation of the running thread."""
        thread = (get_config().get("configurable") or {}).get("thread_id")
        if thread is None:
            raise ValueError(
                "CtxdContextMiddleware needs a thread: invoke the agent with "
                'config={"configurable": {"thread_id": ...}}'
            )
        return encode_id(str(thread), self.prefix)

    def _turn_args(self, new: list[AnyMessage]) -> dict[str, Any]:
        return {
            "format": "openai",
            "idempotency_key": _key(new),
            "model": self.model,
            "model_window": self.model_window,
        }

    @staticmethod
    def _replace(slice_: list[Any]) -> dict[str, Any]:
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *map(_message, slice_)]}

    # -- sync ------------------------------------------------------------------------------------
    def _client(self) -> Client:
        if self._sync is None:
            self._sync = Client(self._address)
        return self._sync

    def _sync_step(self, state: AgentState) -> dict[str, Any] | None:
        new = _new(state["messages"])
        if not new:
            return None
        c, cid = self._client(), self.context_id()
        reply = c.append_turn(cid, convert_to_openai_messages(new), **self._turn_args(new))
        if reply.compaction_due:
            own = None if self.summary_model is None else self._summarise
            compact(c, cid, keep_last=self.keep_last, summariser=self.summariser, summarise=own)
        return self._replace(c.slice(cid))

    def _summarise(self, plan: Any) -> str:
        answer = self.summary_model.invoke(
            [SystemMessage(plan.system_prompt), HumanMessage(plan.excerpt)]
        )
        return answer.text if hasattr(answer, "text") else str(answer.content)

    async def _asummarise(self, plan: Any) -> str:
        answer = await self.summary_model.ainvoke(
            [SystemMessage(plan.system_prompt), HumanMessage(plan.excerpt)]
        )
        return answer.text if hasattr(answer, "text") else str(answer.content)

    def before_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        return self._sync_step(state)

    def after_agent(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        return self._sync_step(state)

    # -- async -----------------------------------------------------------------------------------
    def _aclient(self) -> AsyncClient:
        if self._async is None:
            self._async = AsyncClient(self._address)
        return self._async

    async def _async_step(self, state: AgentState) -> dict[str, Any] | None:
        new = _new(state["messages"])
        if not new:
            return None
        c, cid = self._aclient(), self.context_id()
        reply = await c.append_turn(cid, convert_to_openai_messages(new), **self._turn_args(new))
        if reply.compaction_due:
            own = None if self.summary_model is None else self._asummarise
            await acompact(
                c, cid, keep_last=self.keep_last, summariser=self.summariser, summarise=own
            )
        return self._replace(await c.slice(cid))

    async def abefore_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        return await self._async_step(state)

    async def aafter_agent(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        return await self._async_step(state)


__all__ = ["CtxdContextMiddleware"]
