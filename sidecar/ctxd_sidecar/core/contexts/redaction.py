"""The folded messages as they may leave ctxd for a summariser model (and
as the ledger and the fidelity report read them): every text passed through
the plugins' ``redact`` hook (split from :mod:`.compaction`)."""

from __future__ import annotations

from ctxd_sidecar.core.compaction.view import MessageData, ToolCallData
from ctxd_sidecar.core.contexts.model import Msg
from ctxd_sidecar.core.observe import CompactionHooks, NoHooks


def redacted(hooks: CompactionHooks, context_id: str, msgs: list[Msg]) -> list:
    """``msgs`` with their texts redacted (themselves when no plugin redacts)."""
    if isinstance(hooks, NoHooks):
        return msgs

    def r(text: str) -> str:
        return hooks.redact(context_id, text) if text else text

    return [
        MessageData(
            m.kind,
            m.id,
            text=r(m.text),
            tool_calls=tuple(ToolCallData(c.id, c.name, r(c.arguments_json)) for c in m.tool_calls),
            call_id=m.call_id,
            name=m.name,
            content=r(m.content),
            is_error=m.is_error,
            principal=m.principal,
            tokens=m.tokens,
            seq=m.seq,
        )
        for m in msgs
    ]
