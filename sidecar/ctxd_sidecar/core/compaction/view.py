"""The read-only message view compaction works on.

Compaction needs only a handful of attributes of a transcript entry, so it
states them here instead of depending on the contexts record's own types.
Any object with these attributes satisfies :class:`MessageView` (the
contexts record's messages can carry them directly or be adapted); tests and
callers without a record of their own use :class:`MessageData`.

Attributes by kind (unused ones are empty / ``False``):

========== ==============================================================
kind       meaning of the attributes
========== ==============================================================
system     ``text``
user       ``text``; optional ``principal`` (read with ``getattr``)
assistant  ``text`` (may be empty), ``tool_calls`` (each ``id``, ``name``,
           ``arguments_json``)
tool       ``call_id`` (the ToolCall id it answers), ``name`` (the tool),
           ``content`` (JSON text or plain text), ``is_error``
note       ``text``
========== ==============================================================

``id`` is the message's stable id; ``tokens`` its token estimate (the same
estimate the record uses for ``est_tokens``, overhead included). An optional
``seq`` (read with ``getattr``) orders artifact recency in the ledger, and
an optional ``native`` (``format``, ``data``) is the writer's own form of
the message (:func:`binds_next` reads it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ctxd_sidecar.core.estimate import estimate_message

KINDS = frozenset({"system", "user", "assistant", "tool", "note"})
#: Native format of a stored OpenAI Responses input item (the same name as
#: ``ctxd_sidecar.core.providers.responses.NATIVE_FORMAT``).
RESPONSES_ITEM = "openai.responses.item"
#: How a Responses ``reasoning`` item's note projection starts.
_REASONING_NOTE = "[reasoning]"


def binds_next(m) -> bool:
    """Whether ``m`` must stay with the message after it in any window.

    A Responses ``reasoning`` item precedes the function calls or message
    of the same model response, and the Responses API refuses a
    ``function_call`` (or a message with an id) without its reasoning item,
    and a reasoning item without the item after it. So no cut, tail or
    window boundary falls right after one: both sides stay together.
    """
    if m.kind != "note" or not m.text.startswith(_REASONING_NOTE):
        return False
    native = getattr(m, "native", None)
    return native is not None and native.format == RESPONSES_ITEM


@runtime_checkable
class ToolCallView(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def arguments_json(self) -> str: ...


@runtime_checkable
class MessageView(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def tool_calls(self) -> Sequence[ToolCallView]: ...
    @property
    def call_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def is_error(self) -> bool: ...
    @property
    def tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ToolCallData:
    id: str
    name: str
    arguments_json: str = "{}"


@dataclass(frozen=True, slots=True)
class MessageData:
    """A plain :class:`MessageView`; ``tokens`` defaults to ctxd's estimate
    (:func:`ctxd_sidecar.core.estimate.estimate_message`)."""

    kind: str
    id: str
    text: str = ""
    tool_calls: tuple[ToolCallData, ...] = ()
    call_id: str = ""
    name: str = ""
    content: str = ""
    is_error: bool = False
    principal: str = ""
    tokens: int = field(default=-1)
    #: The record's message sequence number (``-1``: none); optional on a
    #: :class:`MessageView`, read with ``getattr`` (the artifact ledger's recency).
    seq: int = -1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown message kind {self.kind!r}")
        if self.tokens < 0:
            object.__setattr__(self, "tokens", estimate_message(self))

    @classmethod
    def system(cls, id: str, text: str) -> MessageData:
        return cls("system", id, text=text)

    @classmethod
    def user(cls, id: str, text: str, principal: str = "") -> MessageData:
        return cls("user", id, text=text, principal=principal)

    @classmethod
    def assistant(cls, id: str, text: str = "", *calls: ToolCallData) -> MessageData:
        return cls("assistant", id, text=text, tool_calls=tuple(calls))

    @classmethod
    def tool(
        cls, id: str, call_id: str, name: str, content: str, is_error: bool = False
    ) -> MessageData:
        return cls("tool", id, call_id=call_id, name=name, content=content, is_error=is_error)

    @classmethod
    def note(cls, id: str, text: str) -> MessageData:
        return cls("note", id, text=text)
