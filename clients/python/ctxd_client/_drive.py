"""Running an op (a generator that yields calls and receives replies):
:func:`drive` answers each call as it comes, :func:`adrive` awaits each
answer. The op's stepping, written once, is :class:`Steps`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

from ctxd_client.errors import CtxdError

C = TypeVar("C")
R = TypeVar("R")

#: Exceptions of a call that are thrown into the op, for it to handle.
Errors = type[BaseException] | tuple[type[BaseException], ...]


class Steps(Generic[C, R]):
    """An op's calls, one at a time: iterating gives the next call once the
    one before it is answered (``reply``, or ``error`` to throw into the op);
    ``result`` is what the op returned, once the iteration ends."""

    def __init__(self, op: Generator[C, Any, R]) -> None:
        self._op = op
        self.reply: Any = None
        self.error: BaseException | None = None
        self.result: R

    def __iter__(self) -> Iterator[C]:
        while True:
            reply, error, self.reply, self.error = self.reply, self.error, None, None
            try:
                call = self._op.send(reply) if error is None else self._op.throw(error)
            except StopIteration as stop:
                self.result = stop.value
                return
            yield call


def drive(op: Generator[C, Any, R], call: Callable[[C], Any], errors: Errors = CtxdError) -> R:
    """What ``op`` returns, each of its calls answered by ``call``; an
    ``errors`` exception ``call`` raises is thrown into the op."""
    steps = Steps(op)
    for step in steps:
        try:
            steps.reply = call(step)
        except errors as exc:
            steps.error = exc
    return steps.result


async def adrive(
    op: Generator[C, Any, R], call: Callable[[C], Awaitable[Any]], errors: Errors = CtxdError
) -> R:
    """As :func:`drive`, each answer awaited."""
    steps = Steps(op)
    for step in steps:
        try:
            steps.reply = await call(step)
        except errors as exc:
            steps.error = exc
    return steps.result
