"""The integrations' reads keep the provider's rules, model-based.

Hypothesis drives random sequences through ``CtxdSession`` (the OpenAI
Agents SDK session): ``add_items`` with user and assistant messages,
reasoning items, function calls and their outputs (in the call's batch or
the next one), ``get_items(limit)``, ``pop_item``, ``run_compaction`` and
``clear_session``, on a real sidecar. After every step each list an
integration returns is checked against what the provider accepts:

* every item is a Responses API input item (openai's own types, through a
  pydantic ``TypeAdapter``);
* a ``function_call_output`` comes after its ``function_call``, never
  without it, and a ``function_call`` that had a reasoning item comes right
  after it;
* only the summary is not an item as added, and it leads; the rest is the
  tail of what was added, equal as JSON, in order (all of it until a
  compaction);
* ``get_items(limit)`` is the last ``limit`` items (the SDK's protocol), the
  incremental ``get_items()`` is what a fresh session reads, and
  ``pop_item`` returns the last item ``get_items`` showed and removes it
  (with a reasoning item right before it);
* every request a ``create_agent`` model gets through the LangGraph
  middleware (its slice read, as LangChain messages; random tool rounds,
  compacting as it goes) is OpenAI chat messages with every tool result
  right after the call it answers.

The default run is short (a failure is reported as found, not shrunk);
``-m slow`` runs a longer one and shrinks what it finds.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("agents")
pytest.importorskip("langchain.agents")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from hypothesis import HealthCheck, Phase, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, convert_to_openai_messages  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from openai.types.chat import ChatCompletionMessageParam  # noqa: E402
from openai.types.responses import ResponseInputItemParam  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from ctxd_client import AsyncClient  # noqa: E402
from ctxd_client.integrations.langgraph import CtxdContextMiddleware  # noqa: E402
from ctxd_client.integrations.openai_agents import CtxdSession  # noqa: E402

INPUT_ITEM = TypeAdapter(ResponseInputItemParam)
CHAT_MESSAGE = TypeAdapter(ChatCompletionMessageParam)
WORDS = st.lists(st.sampled_from("alpha beta gamma delta /srv/app.py 42 ok".split()), max_size=12)


class ProviderRule(AssertionError):
    """A list an integration returned breaks a rule of the provider."""


class FoldedReasoning(ProviderRule):
    """A compaction folded a reasoning item and kept its function call: the
    sidecar's cut (core/compaction), known and being fixed there."""


#: What the known core cut broke during a run. Recorded instead of raised, so
#: the run goes on looking for anything else; raised once the run passed.
FOLDED: list[str] = []


def _text(words: list[str]) -> str:
    """Long enough that folding it makes the conversation smaller."""
    return " ".join(words) + " lorem ipsum dolor" * 40


def _is_summary(item: dict) -> bool:
    return item.get("role") == "system" and "type" not in item


def check_items(items: list[dict]) -> None:
    """The Responses API's rules on one input list."""
    calls: dict[str, int] = {}
    for i, item in enumerate(items):
        INPUT_ITEM.validate_python(item)
        kind = item.get("type", "message")
        if _is_summary(item) and i:
            raise ProviderRule(f"the summary at {i}, not first")
        if kind == "function_call":
            calls[item["call_id"]] = i
        elif kind == "function_call_output" and item["call_id"] not in calls:
            raise ProviderRule(f"output of {item['call_id']} at {i} without its call before it")


def check_reasoning(items: list[dict], reasoning_of: dict[str, str]) -> None:
    """A function call that had a reasoning item comes right after it."""
    for i, item in enumerate(items):
        rs = (
            reasoning_of.get(item.get("call_id", ""))
            if item.get("type") == "function_call"
            else None
        )
        if rs and (i == 0 or items[i - 1].get("id") != rs):
            found = f"call {item['call_id']} at {i} without its reasoning item {rs}"
            if items and _is_summary(items[0]) and all(x.get("id") != rs for x in items):
                FOLDED.append(found)  # the known core cut: reported when the run ends
                continue
            raise ProviderRule(found)


def check_chat(messages: list[dict]) -> None:
    """OpenAI chat: chat messages, each tool result right after the call it answers."""
    open_calls: set[str] = set()
    for i, m in enumerate(messages):
        CHAT_MESSAGE.validate_python(m)
        if m["role"] == "tool":
            if m["tool_call_id"] not in open_calls:
                raise ProviderRule(f"tool result {m['tool_call_id']} at {i} not after its call")
            open_calls.discard(m["tool_call_id"])
            continue
        open_calls = (
            {c["id"] for c in m.get("tool_calls", [])} if m["role"] == "assistant" else set()
        )


async def _summarise(system_prompt: str, excerpt: str, schema: str) -> str:
    return json.dumps({"facts": ["the conversation so far"]})


class SessionReads(RuleBasedStateMachine):
    """One session per example; ``address`` and ``loop`` are set by the test."""

    address = ""
    loop: asyncio.AbstractEventLoop

    def __init__(self) -> None:
        super().__init__()
        self.client = self._run(self._open())
        self.sid = f"model-{uuid.uuid4().hex[:12]}"
        self.session = CtxdSession(self.sid, self.client, keep_last=2)
        self.added: list[dict] = []  # the items live in the session, as added
        self.compacted = False
        self.pending: list[str] = []  # calls whose output is not in the session
        self.reasoning_of: dict[str, str] = {}  # call_id -> its reasoning item's id
        self.n = 0

    async def _open(self) -> AsyncClient:
        return AsyncClient(self.address)

    def _run(self, coro):
        return self.loop.run_until_complete(coro)

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n:04d}"

    def _add(self, items: list[dict]) -> None:
        self._run(self.session.add_items(items))
        self.added += items

    @initialize()
    def start(self) -> None:
        self._add([{"role": "user", "content": "start"}])

    # -- writes -----------------------------------------------------------------------------------
    @precondition(lambda self: not self.pending)
    @rule(words=WORDS, turns=st.integers(1, 3))
    def add_exchanges(self, words, turns) -> None:
        """User messages and short answers (easy input items), one batch."""
        roles = ["user", "assistant"] * turns
        self._add([{"role": r, "content": _text(words)} for r in roles])

    @precondition(lambda self: not self.pending)
    @rule(words=WORDS)
    def add_assistant(self, words) -> None:
        text = {"type": "output_text", "text": _text(words), "annotations": []}
        item = {"type": "message", "role": "assistant", "id": self._id("msg")}
        self._add([{**item, "status": "completed", "content": [text]}])

    @precondition(lambda self: not self.pending)
    @rule(calls=st.integers(1, 2), reasoned=st.booleans(), answered=st.booleans(), words=WORDS)
    def add_tool_round(self, calls, reasoned, answered, words) -> None:
        """A model step of tool calls (after a reasoning item, or not); the
        outputs in the same batch or, as the SDK may, in the next one."""
        batch: list[dict] = []
        rs = self._id("rs") if reasoned else ""
        if rs:
            summary = [{"type": "summary_text", "text": _text(words)}]
            batch.append({"type": "reasoning", "id": rs, "summary": summary})
        ids = [self._id("call") for _ in range(calls)]
        for call_id in ids:
            args = json.dumps({"q": _text(words)})
            fc = {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id}
            batch.append({**fc, "name": "lookup", "arguments": args})
            if rs:
                self.reasoning_of[call_id] = rs
                rs = ""  # the reasoning item precedes the first call of the step
        if answered:
            batch += [self._output(c, words) for c in ids]
        else:
            self.pending += ids
        self._add(batch)

    def _output(self, call_id: str, words: list[str]) -> dict:
        return {"type": "function_call_output", "call_id": call_id, "output": _text(words)}

    @precondition(lambda self: bool(self.pending))
    @rule(words=WORDS)
    def answer_pending(self, words) -> None:
        outputs = [self._output(c, words) for c in self.pending]
        self.pending = []
        self._add(outputs)

    @rule(times=st.integers(1, 4))
    def pop(self, times) -> None:
        for _ in range(times):
            self._pop()

    def _pop(self) -> None:
        before = self._run(self.session.get_items())
        popped = self._run(self.session.pop_item())
        assert popped == (before[-1] if before else None)
        if popped is None:
            return
        if _is_summary(popped):
            event("popped the summary")
            assert len(before) == 1  # the summary is last only when it is all that is left
            self.added, self.compacted, self.pending = [], False, []
            return
        assert self.added.pop() == popped
        kind = popped.get("type")
        if kind == "function_call_output":
            self.pending.append(popped["call_id"])
        elif kind == "function_call" and popped["call_id"] in self.pending:
            self.pending.remove(popped["call_id"])
        rest = before[:-1]
        # A reasoning item right before it went with it: no cut leaves one
        # without the item it came with.
        while rest and rest[-1].get("type") == "reasoning":
            event("popped a reasoning item with the item after it")
            assert self.added.pop() == rest.pop()
        assert self._run(self.session.get_items()) == rest

    @rule(own_model=st.booleans())
    def compact(self, own_model) -> None:
        """By the sidecar's summariser (which declines what would not shrink),
        or by the runtime's own model (its answer applied as given)."""
        self.session.summarise = _summarise if own_model else None
        self._run(self.session.run_compaction({"force": True}))
        now = _is_summary((self._run(self.session.get_items()) or [{}])[0])
        event(f"compacted: {now}")
        self.compacted = self.compacted or now

    @rule()
    def clear(self) -> None:
        self._run(self.session.clear_session())
        self.added, self.compacted, self.pending = [], False, []
        assert self._run(self.session.get_items()) == []

    # -- reads ----------------------------------------------------------------------------------
    @rule(limit=st.integers(1, 12))
    def read_tail(self, limit) -> None:
        whole = self._run(self.session.get_items())
        tail = self._run(self.session.get_items(limit=limit))
        # The last `limit` items (the SDK's protocol), fewer only where the
        # cut would fall inside a tool round (never leaving a user message out).
        assert len(tail) <= limit and tail == whole[len(whole) - len(tail) :], (limit, tail)
        left_out = whole[max(0, len(whole) - limit) : len(whole) - len(tail)]
        assert not any(i.get("role") == "user" for i in left_out), left_out
        check_items(tail)

    @invariant()
    def reads_keep_the_rules(self) -> None:
        items = self._run(self.session.get_items())
        fresh = CtxdSession(self.sid, self.client)
        assert self._run(fresh.get_items()) == items  # incremental == fresh
        check_items(items)
        check_reasoning(items, self.reasoning_of)
        rest = items[1:] if items and _is_summary(items[0]) else items
        if not self.compacted:
            assert rest == self.added and len(rest) == len(items)
        else:
            assert rest == self.added[len(self.added) - len(rest) :] if rest else True

    def teardown(self) -> None:
        self._run(self.client.close())


def _run_machine(address: str, examples: int, steps: int, *, shrink: bool = True) -> None:
    loop = asyncio.new_event_loop()
    SessionReads.address, SessionReads.loop = address, loop
    FOLDED.clear()
    try:
        run_state_machine_as_test(
            SessionReads,
            settings=settings(
                max_examples=examples,
                stateful_step_count=steps,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
                + ([Phase.shrink] if shrink else []),
            ),
        )
    finally:
        loop.close()
    if FOLDED:
        raise FoldedReasoning(f"{FOLDED[0]} (and {len(FOLDED) - 1} more)")


def test_integration_reads_keep_the_provider_rules(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    _run_machine(sc.address, examples=10, steps=25, shrink=False)


@pytest.mark.slow
def test_integration_reads_keep_the_provider_rules_long(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    _run_machine(sc.address, examples=100, steps=40)


# -- the LangGraph middleware ------------------------------------------------------------------
#: What the scripted model does next (the number of parallel calls, 0: answer)
#: and every request it got, as OpenAI chat messages.
SCRIPT: list[int] = []
REQUESTS: list[list[dict]] = []


class ScriptedTools(BaseChatModel):
    @property
    def _llm_type(self) -> str:
        return "scripted-tools"

    def bind_tools(self, tools, **kw) -> ScriptedTools:
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
        REQUESTS.append(convert_to_openai_messages(messages))
        calls = SCRIPT.pop(0) if SCRIPT else 0
        if not calls:
            reply = AIMessage(content=_text(["answer"]))
        else:
            args = {"topic": f"t{len(REQUESTS)}"}
            ids = [f"call_{uuid.uuid4().hex[:8]}" for _ in range(calls)]
            reply = AIMessage(
                content="", tool_calls=[{"id": i, "name": "lookup", "args": args} for i in ids]
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return _text([topic])


def _drive_middleware(address: str, examples: int, *, shrink: bool = True) -> None:
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])

    @settings(max_examples=examples, deadline=None, phases=phases)
    @given(
        turns=st.lists(st.lists(st.integers(1, 2), max_size=3), min_size=1, max_size=6),
        keep=st.integers(2, 6),
    )
    def run(turns: list[list[int]], keep: int) -> None:
        middleware = CtxdContextMiddleware(address, model_window=1500, keep_last=keep)
        agent = create_agent(
            ScriptedTools(), tools=[lookup], middleware=[middleware], checkpointer=InMemorySaver()
        )
        config = {"configurable": {"thread_id": f"lg-{uuid.uuid4().hex[:12]}"}}
        for n, rounds in enumerate(turns):
            SCRIPT[:], REQUESTS[:] = [*rounds, 0], []
            agent.invoke({"messages": [{"role": "user", "content": _text([f"q{n}"])}]}, config)
            assert len(REQUESTS) == len(rounds) + 1
            for request in REQUESTS:
                check_chat(request)
                assert request[-1]["role"] in ("user", "tool")

    run()


def test_middleware_requests_keep_the_chat_rules(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    _drive_middleware(sc.address, examples=8, shrink=False)


@pytest.mark.slow
def test_middleware_requests_keep_the_chat_rules_long(start_sidecar):
    sc = start_sidecar("memory://", contexts__auto_compact=False)
    _drive_middleware(sc.address, examples=60)
