"""The tool calls of a live transcript, and which have their result.

A tool result must answer a call of the transcript, and only once: OpenAI
and Anthropic both refuse a request with a result for no call, or with two
results for one. Call ids come from the provider and may be used again
(some number calls per turn), so a result answers the latest call with its
id, and a new call with that id opens it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class _Call(Protocol):
    id: str


class Msg(Protocol):
    """What the book reads of a message (:class:`.model.Msg` has it)."""

    tool_calls: Sequence[_Call]
    call_id: str


@dataclass(slots=True)
class CallBook:
    #: Tool call ids of the live transcript (tool results must name one).
    ids: set[str] = field(default_factory=set)
    #: Those whose latest call already has its result (a turn may not add another).
    answered: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, messages: Iterable[Msg]) -> CallBook:
        book = cls()
        for m in messages:
            book.add(m)
        return book

    def add(self, m: Msg) -> None:
        """A message appended to the transcript."""
        for c in m.tool_calls:
            self.track(c.id, result=False)
        if m.call_id:
            self.track(m.call_id, result=True)

    def track(self, call_id: str, *, result: bool) -> None:
        """A call (open until answered) or a result, in transcript order."""
        if not result:
            self.ids.add(call_id)
            self.answered.discard(call_id)
        elif call_id in self.ids:
            self.answered.add(call_id)
