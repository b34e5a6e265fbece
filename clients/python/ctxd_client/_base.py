"""The verbs both clients share, each written once as its op builder (in
``_context_ops``, ``_agent_ops``, ``_history_ops``) and made a method by
``_ops.verb``; the client runs the op (``_run``: blocking in Client,
awaited in AsyncClient). Channel set-up and retry policy are in ``_connect``."""

from __future__ import annotations

from typing import Any

from ctxd_client import _ops as ops
from ctxd_client._agent_ops import _AgentVerbs, _CompactionVerbs, _MemoryVerbs
from ctxd_client._api.ctxd.v1 import context_pb2_grpc, memory_pb2_grpc
from ctxd_client._context_ops import _ContextVerbs, _TranscriptVerbs
from ctxd_client._history_ops import _HistoryVerbs


class _Verbs(
    _TranscriptVerbs,
    _ContextVerbs,
    _HistoryVerbs,
    _CompactionVerbs,
    _AgentVerbs,
    _MemoryVerbs,
):
    """Every RPC as a typed method; subclasses provide ``_run``."""

    _timeout: float | None
    _metadata: tuple

    def _stubs(self, channel) -> dict:
        return {
            ops.CONTEXT: context_pb2_grpc.ContextServiceStub(channel),
            ops.MEMORY: memory_pb2_grpc.MemoryServiceStub(channel),
        }

    def _run(self, op: ops.Op, timeout: float | None) -> Any:  # pragma: no cover
        raise NotImplementedError
