"""What every verb is made of: an op, a generator that yields calls and
receives replies, building the requests and reading the replies once for
both clients (each only sends the calls, blocking or awaited); ``verb``,
which makes a client method of an op builder; the reply types and the
conversions the verbs share.

The verbs themselves: ``_context_ops``, ``_agent_ops``, ``_history_ops``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message as PbMessage

from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client.errors import CtxdError

CONTEXT = "ctxd.v1.ContextService"
MEMORY = "ctxd.v1.MemoryService"


@dataclass(frozen=True)
class Call:
    """One unary call: which method, what request, whether it may be retried."""

    service: str
    method: str
    request: PbMessage
    retry: bool = False


T = TypeVar("T")
S = TypeVar("S")
R = TypeVar("R")
P = ParamSpec("P")

#: An op whose result is ``T``.
Op = Generator[Call, Any, T]


def paged(service: str, method: str, req: Any) -> Op[list]:
    """Every page of a paged read, in order (each call retried: a read)."""
    found = [(yield Call(service, method, req, retry=True))]
    while found[-1].next_page_token:
        req.page_token = found[-1].next_page_token
        found.append((yield Call(service, method, req, retry=True)))
    return found


def paged_items(service: str, method: str, req: Any, name: str) -> Op[list]:
    """The items of every page's field ``name`` in a paged read, in order."""
    found = yield from paged(service, method, req)
    return [item for page in found for item in getattr(page, name)]


def verb(build: Callable[Concatenate[S, P], Op[R]]) -> Callable[Concatenate[S, P], R]:
    """The client method of the op builder ``build``: its op, run by the
    client (``self._run``: blocking in Client, awaited in AsyncClient), with
    ``build``'s signature and docstring, returning what the op returns.
    ``timeout``, which every verb declares last for its callers, is taken
    here for the call: the op never sees it."""

    @functools.wraps(build)
    def run(self: Any, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        return self._run(build(self, *args, **kwargs), timeout)

    signature = inspect.signature(build)
    returns = signature.return_annotation  # text: "Op[X]" (postponed annotations)
    if isinstance(returns, str) and returns.startswith("Op[") and returns.endswith("]"):
        returns = returns[len("Op[") : -1]
    run.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]
    run.__annotations__ = {**build.__annotations__, "return": returns}
    return run  # type: ignore[return-value]


class Version(int):
    """A context version that knows its incarnation (ContextInfo.incarnation).

    A conversation deleted and created again starts its versions over, so
    the number alone may name a point of the old transcript. Passed back as
    ``since_version``, the incarnation rides along and a re-created
    conversation is answered "replace". Otherwise an ordinary int.
    """

    incarnation: str

    def __new__(cls, value: int, incarnation: str = "") -> Version:
        self = super().__new__(cls, value)
        self.incarnation = incarnation
        return self

    def __reduce__(self):  # copy and pickle keep the incarnation
        return (Version, (int(self), self.incarnation))


def version_of(info: Any) -> Version:
    return Version(info.version, getattr(info, "incarnation", ""))


class SliceMessages(list):
    """The whole slice: a list of messages, with the version it reflects
    (a :class:`Version`: pass it back as ``since_version``).

    ``system`` is the provider's separate system prompt (format "anthropic");
    None otherwise.
    """

    version: int = 0
    system: Any = None


@dataclass
class SliceDelta:
    """An incremental read: ``change`` is "none", "append" or "replace";
    ``version`` a :class:`Version` to pass back as ``since_version``."""

    change: str
    version: int
    messages: list = field(default_factory=list)
    system: Any = None


@dataclass
class Turn:
    """A whole turn in one call: what AppendTurn answered (``appended``) and
    what changed in the slice since the version the caller held (``next``)."""

    appended: Any
    next: SliceDelta


@dataclass
class Truncated:
    """What TruncateContext removed: ``removed`` (messages, oldest first; the
    provider's dicts with a ``format``), and the ``version`` after it."""

    version: int
    removed: list


_FORMATS = ("ctxd", "openai", "anthropic", "openai_responses")


def enum_value(enum_type, prefix: str, value: int | str | None) -> int:
    """Accepts 2, "CONTEXT_KIND_ROOT" or "root" for an enum field."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    name = value if value.upper().startswith(prefix) else f"{prefix}{value}"
    try:
        return enum_type.Value(name.upper())
    except ValueError:
        raise CtxdError(f"unknown {prefix.lower().rstrip('_')} {value!r}") from None


def to_pb(value: Mapping | PbMessage, cls: type[PbMessage]) -> Any:
    """A generated message from a dict in ctxd's shape (proto field names)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, PbMessage):
        raise CtxdError(f"expected {cls.DESCRIPTOR.name}, got {type(value).__name__}")
    try:
        return json_format.ParseDict(dict(value), cls())
    except json_format.ParseError as exc:
        raise CtxdError(f"not a {cls.DESCRIPTOR.name}: {exc}") from None


def to_dict(message: PbMessage) -> dict:
    """A generated message as a dict in ctxd's shape (the inverse of to_pb)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def has(cls: type[PbMessage], name: str) -> bool:
    return name in cls.DESCRIPTOR.fields_by_name


def format_value(fmt: str) -> int:
    if fmt not in _FORMATS:
        raise CtxdError(f"format must be one of {', '.join(_FORMATS)}, not {fmt!r}")
    enum = getattr(pb, "MessageFormat", None)
    if enum is None:
        raise CtxdError("this sidecar's API has no provider formats (MessageFormat)")
    return enum.Value(f"MESSAGE_FORMAT_{fmt.upper()}")
