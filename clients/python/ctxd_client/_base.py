"""What both clients share: every verb, each written once as its op builder
(in ``_context_ops``, ``_agent_ops``, ``_history_ops``) and made a method by
``_ops.verb``, and the channel they are sent over, with its token and retry
decision. Each client is the transport: it sends a call and runs an op,
blocking (Client) or awaited (AsyncClient). Channel arguments, tokens and
the diagnosis of a failed connection are in ``_connect``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar

from ctxd_client._agent_ops import _AgentVerbs, _CompactionVerbs, _MemoryVerbs
from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client._api.ctxd.v1 import context_pb2_grpc, memory_pb2_grpc
from ctxd_client._connect import (
    DEFAULT_RETRY,
    DEFAULT_TIMEOUT,
    CannotConnect,
    Retry,
    TokenSource,
    channel_args,
)
from ctxd_client._context_ops import _ContextVerbs, _TranscriptVerbs
from ctxd_client._history_ops import _HistoryVerbs
from ctxd_client._ops import CONTEXT, MEMORY, Call, Op
from ctxd_client.errors import CtxdError, Unavailable


class _BaseClient(
    _TranscriptVerbs,
    _ContextVerbs,
    _HistoryVerbs,
    _CompactionVerbs,
    _AgentVerbs,
    _MemoryVerbs,
):
    """Every RPC as a typed method, over one channel. A subclass gives the
    ``grpc`` module of its channel (``_grpc``: grpc or grpc.aio), how an op
    is run (``_drive``: ``drive`` or ``adrive``) and a call sent (``_unary``)."""

    _grpc: ClassVar[Any]
    _drive: ClassVar[Callable[..., Any]]

    def __init__(
        self,
        address: str | None = None,
        *,
        token: str | None = None,
        tls: bool = False,
        root_ca: bytes | str | os.PathLike | None = None,
        client_cert: bytes | str | os.PathLike | None = None,
        client_key: bytes | str | os.PathLike | None = None,
        server_name: str | None = None,
        token_file: str | os.PathLike | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: Retry = DEFAULT_RETRY,
    ) -> None:
        target, creds, options = channel_args(
            address,
            tls=tls,
            root_ca=root_ca,
            client_cert=client_cert,
            client_key=client_key,
            server_name=server_name,
        )
        self.address = target
        self._channel = (
            self._grpc.secure_channel(target, creds, options)
            if creds
            else self._grpc.insecure_channel(target, options)
        )
        self._plaintext = creds is None
        self._tokens = TokenSource(token, None if token_file is None else os.fspath(token_file))
        self._timeout = timeout
        self._retry = retry
        self._stub: dict[str, Any] = {
            CONTEXT: context_pb2_grpc.ContextServiceStub(self._channel),
            MEMORY: memory_pb2_grpc.MemoryServiceStub(self._channel),
        }

    @property
    def _metadata(self) -> tuple:
        return self._tokens.metadata()

    def _unary(self, call: Call, timeout: float | None) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _run(self, op: Op, timeout: float | None) -> Any:
        timeout = self._timeout if timeout is None else timeout
        return self._drive(op, lambda call: self._unary(call, timeout))

    def _method(self, call: Call) -> Any:
        return getattr(self._stub[call.service], call.method)

    def _attempts(self, call: Call) -> range:
        return range(self._retry.attempts if call.retry else 1)

    def _raise_unless_retried(self, exc: CtxdError, attempt: int, call: Call) -> None:
        """Raises ``exc`` unless retrying may help (UNAVAILABLE, but not
        :class:`CannotConnect`) and ``call`` has an attempt after ``attempt``."""
        more = call.retry and attempt < self._retry.attempts - 1
        if not more or not isinstance(exc, Unavailable) or isinstance(exc, CannotConnect):
            raise exc from None

    def _watch_stream(self, context_id: str, timeout: float | None) -> Any:
        return self._stub[CONTEXT].WatchContext(
            pb.WatchContextRequest(context_id=context_id),
            timeout=timeout,
            metadata=self._metadata,
        )
