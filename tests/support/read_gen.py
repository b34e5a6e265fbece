"""What a conversation can be sent: turns of every message kind in every
write format, and every OpenAI Responses input item type, for the read
model (tests/contexts/test_read_model.py).

A turn is drawn abstractly (``Body``) and written in a format by
:class:`Writer`; the tables at the end say which generator covers which
message kind, write format, native format and Responses item type, and
the coverage test compares them with the protos and the SDK.
"""

from __future__ import annotations

import itertools
import json
import math
import typing
from collections.abc import Iterable, Mapping

from google.protobuf import json_format
from hypothesis import strategies as st
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.providers import NATIVE_FORMATS
from ctxd_sidecar.core.providers.responses import NATIVE_FORMAT
from tests.providers.test_providers import sdk_valid
from tests.support.responses_corpus import _PNG, corpus

#: Long enough that compactions save more than their summary takes.
LONG_TEXT = "Here is what I found. " + "The logs say nothing unusual, " * 12
TEXTS = ["hi", "and then?", " ", "q?", "héllo — 你好 🚀", LONG_TEXT]
ID_STYLES = {
    "reused": lambda i, r: f"call{i}",
    "foreign": lambda i, r: f"functions.Bash:{i}" if r % 2 else f"call|{i}",
    "unique": lambda i, r: f"toolu_{r}_{i}",
}
#: A writer's own native payload format (not one ctxd knows): kept, never read.
CUSTOM_NATIVE = "test.writer.json"


# -- Responses items ---------------------------------------------------------------------------
class _Unfit(Exception):
    pass


#: What one generated item may hold, in JSON values: hypothesis may build
#: an SDK type's ``Iterable[int]`` field as a ``range`` of any length, and
#: one such item expanded without a bound filled a test worker's memory.
PLAIN_BUDGET = 5_000


def _plain(x, budget: list[int] | None = None):
    """What hypothesis builds for a TypedDict, as plain JSON values (its
    Iterable fields come as iterators and sets); _Unfit past PLAIN_BUDGET."""
    budget = [PLAIN_BUDGET] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise _Unfit
    if isinstance(x, str | bool | int) or x is None:
        return x
    if isinstance(x, float):
        if not math.isfinite(x):
            raise _Unfit
        return x
    if isinstance(x, Mapping):
        return {str(k): _plain(v, budget) for k, v in x.items()}
    if isinstance(x, Iterable) and not isinstance(x, bytes | bytearray):
        return [_plain(v, budget) for v in itertools.islice(x, budget[0] + 1)]
    raise _Unfit


_ITEMS = TypeAdapter(list[ResponseInputItemParam])


def _fit(x):
    """``x`` as plain JSON when the SDK type takes it as it is, else None."""
    try:
        item = _plain(x)
        sdk_valid(_ITEMS, [item])
    except (_Unfit, AssertionError):
        return None
    return item


def _item_type(cls) -> str | None:
    hint = typing.get_type_hints(cls).get("type")
    values = [a for a in typing.get_args(hint) if isinstance(a, str)]
    for a in typing.get_args(hint):  # Optional[Literal[...]]
        values += [v for v in typing.get_args(a) if isinstance(v, str)]
    return values[0] if values else None


def sdk_item_types() -> dict[str, list[type]]:
    """Every Responses input item type the installed openai SDK declares."""
    out: dict[str, list[type]] = {}
    for cls in typing.get_args(ResponseInputItemParam):
        out.setdefault(_item_type(cls), []).append(cls)
    return out


def _sdk_items(classes: list[type]):
    """Items of these SDK types, built by hypothesis from the types themselves."""
    return st.one_of(*(st.from_type(c) for c in classes)).map(_fit).filter(bool)


def _corpus_of(kind: str) -> list[dict]:
    return [i for i in corpus() if i.get("type") == kind]


#: Written by hand: these carry pairing (calls, reasoning) or ctxd's projection rules.
_HAND = {"message", "function_call", "function_call_output", "reasoning", "item_reference"}


def other_items() -> dict[str, st.SearchStrategy]:
    """Per item type that ctxd keeps as a note: a strategy of valid items
    (the corpus's ones and hypothesis-built ones from the SDK type)."""
    out = {}
    for kind, classes in sdk_item_types().items():
        if kind in _HAND:
            continue
        known = _corpus_of(kind)
        built = _sdk_items(classes)
        out[kind] = st.one_of(st.sampled_from(known), built) if known else built
    out["item_reference"] = st.just({"type": "item_reference", "id": "msg_0001"})
    out["reasoning"] = st.sampled_from(_corpus_of("reasoning"))
    return out


# -- turns -------------------------------------------------------------------------------------
def body_strategy(other: dict[str, st.SearchStrategy]):
    """An abstract turn: (kind, *args), written later in some format."""
    return st.one_of(
        st.tuples(st.just("user"), st.sampled_from(TEXTS), st.sampled_from(["", "ana"])),
        st.tuples(st.just("system"), st.sampled_from(["Be brief.", "Use metric units."])),
        st.tuples(st.just("note"), st.sampled_from(["user went idle", "timer fired"])),
        st.tuples(st.just("text"), st.sampled_from(["ok", "done.", LONG_TEXT])),
        st.tuples(
            st.just("calls"),
            st.integers(1, 3),
            st.sampled_from(sorted(ID_STYLES)),
            st.booleans(),  # with reasoning first (Responses) / text (others)
            st.booleans(),  # answered in the same turn
        ),
        st.tuples(st.just("results"), st.integers(0, 7), st.booleans(), st.booleans()),
        st.tuples(st.just("image"), st.sampled_from(["What is this?", "and this one?"])),
        st.tuples(st.just("item"), st.sampled_from(sorted(other)).flatmap(lambda k: other[k])),
    )


#: The format a body is written in when the drawn one cannot say it.
_ONLY = {"note": ("ctxd", "proto", "responses"), "image": ("responses",), "item": ("responses",)}
WRITE_FORMATS = {
    pb.MESSAGE_FORMAT_UNSPECIFIED: "proto",
    pb.MESSAGE_FORMAT_CTXD: "ctxd",
    pb.MESSAGE_FORMAT_OPENAI: "openai",
    pb.MESSAGE_FORMAT_ANTHROPIC: "anthropic",
    pb.MESSAGE_FORMAT_OPENAI_RESPONSES: "responses",
}
_PB_FORMAT = {v: k for k, v in WRITE_FORMATS.items()}


class Writer:
    """Builds AppendTurnRequests for one conversation and remembers what a
    later turn needs: the calls still open, the reasoning item each
    Responses function_call came with."""

    def __init__(self, cid: str) -> None:
        self.cid = cid
        self.open: list[str] = []  # ids whose latest call has no result, oldest first
        self.round = 0
        self.seq = 0
        #: function_call item id -> its reasoning item id, and back.
        self.reasoning_of: dict[str, str] = {}
        self.follows: dict[str, str] = {}
        #: call id as written -> the id an Anthropic reader holds for it.
        self.anthropic_ids: dict[str, str] = {}

    def _id(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}_{self.cid}_{self.seq}"

    def request(self, body: tuple, fmt: str) -> tuple[pb.AppendTurnRequest, str, list[str]] | None:
        """(request, format written, call ids it answers); None: nothing to send."""
        kind = body[0]
        if kind in _ONLY and fmt not in _ONLY[kind]:
            fmt = _ONLY[kind][0]
        msgs, answered = self._abstract(body)
        if msgs is None:
            return None
        req = pb.AppendTurnRequest(context_id=self.cid)
        if fmt == "proto":
            req.messages.extend(_pb(m) for m in msgs)
        elif fmt == "ctxd":
            req.messages_json = json.dumps([json_format.MessageToDict(_pb(m)) for m in msgs])
        elif fmt == "openai":
            req.messages_json = json.dumps([_openai(m) for m in msgs])
        elif fmt == "anthropic":
            system = [m[1] for m in msgs if m[0] == "system"]
            rest = [_anthropic(m, self.anthropic_ids) for m in msgs if m[0] != "system"]
            if system:
                req.system_json = json.dumps([{"type": "text", "text": t} for t in system])
            if not rest:  # a system-only turn: Anthropic says it with a user message
                rest = [{"role": "user", "content": "noted"}]
            req.messages_json = json.dumps(rest)
        else:
            req.messages_json = json.dumps([x for m in msgs for x in self._responses(m)])
        req.format = _PB_FORMAT[fmt]
        return req, fmt, answered

    def _abstract(self, body: tuple):
        kind = body[0]
        if kind == "user":
            return [("user", body[1], body[2])], []
        if kind in ("system", "note", "text", "image", "item"):
            return [(kind, body[1])], []
        if kind == "calls":
            self.round += 1
            n, style, lead, answered = body[1:]
            ids = [ID_STYLES[style](i, self.round) for i in range(n)]
            calls = [(c, "sh", json.dumps({"n": i})) for i, c in enumerate(ids)]
            msgs = [("assistant", "let me look" if lead else "", calls, lead)]
            self.open = [c for c in self.open if c not in ids] + ids
            if answered:
                msgs += [("tool", c, f"r {c}", False, False) for c in ids]
                self.open = [c for c in self.open if c not in ids]
            return msgs, ids if answered else []
        if kind == "results":
            chosen = [c for i, c in enumerate(self.open) if body[1] >> (i % 3) & 1]
            if not chosen:
                return None, []
            return [("tool", c, f"r {c}", body[2], body[3]) for c in chosen], chosen
        raise AssertionError(kind)

    def _responses(self, m: tuple) -> list[dict]:
        kind = m[0]
        if kind == "user":
            return [{"role": "user", "content": m[1]}]
        if kind == "system":
            return [{"role": "developer", "content": [{"type": "input_text", "text": m[1]}]}]
        if kind == "note":
            return [{"type": "compaction", "encrypted_content": f"gAAAA-{m[1]}"}]
        if kind == "text":
            return [_output_message(self._id("msg"), m[1])]
        if kind == "image":
            return [_image_message(m[1])]
        if kind == "item":
            return [m[1]]
        if kind == "tool":
            return [{"type": "function_call_output", "call_id": m[1], "output": m[2]}]
        out = []
        _, text, calls, lead = m
        if text:
            out.append(_output_message(self._id("msg"), text))
        rs = None
        if lead:  # the reasoning item that produced the calls
            rs = self._id("rs")
            out.append(
                {
                    "id": rs,
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": "Checking with the tool."}],
                    "encrypted_content": f"gAAAAB-{rs}",
                }
            )
        for c, name, args in calls:
            fc = self._id("fc")
            out.append(
                {"id": fc, "type": "function_call", "call_id": c, "name": name, "arguments": args}
            )
            if rs is not None:
                self.reasoning_of[fc] = rs
                self.follows.setdefault(rs, fc)
        return out


def _output_message(item_id: str, text: str) -> dict:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _image_message(text: str) -> dict:
    return {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": text},
            {"type": "input_image", "image_url": _PNG, "detail": "low"},
        ],
    }


def _pb(m: tuple) -> pb.Message:
    kind = m[0]
    if kind == "user":
        return pb.Message(user=pb.UserMessage(text=m[1], principal=m[2]))
    if kind == "system":
        return pb.Message(system=pb.SystemMessage(text=m[1]))
    if kind == "note":
        msg = pb.Message(note=pb.NoteMessage(text=m[1]))
        # A writer's own form of the message, kept beside it.
        msg.native.format = CUSTOM_NATIVE
        msg.native.data = json.dumps({"note": m[1]}).encode()
        return msg
    if kind == "text":
        return pb.Message(assistant=pb.AssistantMessage(text=m[1]))
    if kind == "assistant":
        calls = [pb.ToolCall(id=c, name=n, arguments_json=a) for c, n, a in m[2]]
        return pb.Message(assistant=pb.AssistantMessage(text=m[1], tool_calls=calls))
    _, call_id, content, is_error, as_json = m
    result = pb.ToolResult(call_id=call_id, name="sh", is_error=is_error)
    if as_json:
        result.json = json.dumps({"out": content})
    else:
        result.text = content
    return pb.Message(tool=result)


def _openai(m: tuple) -> dict:
    kind = m[0]
    if kind == "user":
        return {"role": "user", "content": m[1], **({"name": m[2]} if m[2] else {})}
    if kind == "system":
        return {"role": "system", "content": m[1]}
    if kind == "text":
        return {"role": "assistant", "content": m[1]}
    if kind == "assistant":
        calls = [
            {"id": c, "type": "function", "function": {"name": n, "arguments": a}}
            for c, n, a in m[2]
        ]
        return {"role": "assistant", "content": m[1] or None, "tool_calls": calls}
    return {"role": "tool", "tool_call_id": m[1], "content": m[2]}


def _anthropic(m: tuple, held: dict[str, str]) -> dict:
    kind = m[0]
    if kind == "user":
        return {"role": "user", "content": m[1]}
    if kind == "text":
        return {"role": "assistant", "content": [{"type": "text", "text": m[1]}]}
    if kind == "assistant":
        blocks = [{"type": "text", "text": m[1]}] if m[1] else []
        blocks += [
            {"type": "tool_use", "id": c, "name": n, "input": json.loads(a)} for c, n, a in m[2]
        ]
        return {"role": "assistant", "content": blocks}
    # As the Anthropic runtime answers: with the id it read for the call.
    _, call_id, content, is_error, _ = m
    block = {"type": "tool_result", "tool_use_id": held.get(call_id, call_id), "content": content}
    if is_error:
        block["is_error"] = True
    return {"role": "user", "content": [block]}


# -- the tables the coverage test reads ----------------------------------------------------
#: Message.kind oneof field -> the body kinds that write it.
MESSAGE_KINDS = {
    "system": ("system",),
    "user": ("user", "image"),
    "assistant": ("text", "calls"),
    "tool": ("results", "calls"),
    "note": ("note", "item"),
}
#: Native payload formats -> the body kinds that write one.
NATIVE_WRITERS = {
    NATIVE_FORMAT: ("user", "text", "calls", "results", "item"),
    CUSTOM_NATIVE: ("note",),
}
KNOWN_NATIVE_FORMATS = NATIVE_FORMATS
#: Every body kind body_strategy draws.
BODY_KINDS = ("user", "system", "note", "text", "calls", "results", "image", "item")
#: Responses item types the Writer writes itself -> the body kinds that do.
RESPONSES_BY_HAND = {
    "message": ("user", "system", "text", "image"),
    "function_call": ("calls",),
    "function_call_output": ("results", "calls"),
    "reasoning": ("calls",),
}
