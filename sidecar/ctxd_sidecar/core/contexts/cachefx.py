"""What a compaction does to a provider's prompt cache, and the token count
of the blocks a summary adds (split from :mod:`.compaction`)."""

from __future__ import annotations

from dataclasses import dataclass

from ctxd_sidecar.core.compaction import Summary
from ctxd_sidecar.core.contexts.model import ContextState
from ctxd_sidecar.core.estimate import MESSAGE_OVERHEAD, estimate_text


@dataclass(frozen=True)
class CacheEffect:
    """What a compaction does to a provider's prompt cache (estimated tokens)."""

    tokens_saved: int
    #: Leading slice tokens that stay byte-identical (still cached).
    prefix_tokens_kept: int
    #: Tokens of the new slice after that prefix (read anew).
    tokens_rewritten: int


def cache_effect(st: ContextState, summary: Summary, folded: int) -> CacheEffect:
    """Compare the slice now with the slice after folding ``folded`` messages
    under ``summary``: how long a prefix stays byte-identical, and the rest."""
    plan = [st.plan.render()] if st.plan is not None else []
    now_blocks = st.slice_blocks()
    new_blocks = [t for t in (summary.render(), *plan) if t]
    now = [(t, _text_tokens(t)) for t in now_blocks] + [(m.id, m.tokens) for m in st.messages]
    new = [(t, _text_tokens(t)) for t in new_blocks] + [
        (m.id, m.tokens) for m in st.messages[folded:]
    ]
    kept = 0
    for (a, tokens), (b, _) in zip(now, new, strict=False):
        if a != b:
            break
        kept += tokens
    total_now, total_new = sum(t for _, t in now), sum(t for _, t in new)
    return CacheEffect(max(0, total_now - total_new), kept, total_new - kept)


def _text_tokens(text: str) -> int:
    return estimate_text(text) + MESSAGE_OVERHEAD


def _block_tokens(summary: Summary, st: ContextState) -> int:
    """What ``refresh_blocks`` will count with ``summary`` in place."""
    n = 0
    for text in (summary.render(), st.plan.render() if st.plan else ""):
        if text:
            n += estimate_text(text) + MESSAGE_OVERHEAD
    return n
