"""A provider's response usage as RecordUsage fields: OpenAI Chat
Completions (``prompt_tokens``, ``prompt_tokens_details.cached_tokens``),
OpenAI Responses (``input_tokens``, ``input_tokens_details.cached_tokens``)
and Anthropic Messages (``input_tokens`` without the cache, plus
``cache_read_input_tokens`` and ``cache_creation_input_tokens``), as a dict
or as the SDK's usage object."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxd_client._api.ctxd.v1 import context_pb2 as pb

_ANTHROPIC_CACHE = ("cache_read_input_tokens", "cache_creation_input_tokens")


def _as_dict(usage: Any) -> dict[str, Any]:
    if isinstance(usage, Mapping):
        return dict(usage)
    dump = getattr(usage, "model_dump", None) or getattr(usage, "to_dict", None)
    if callable(dump):
        return dict(dump())
    return {k: v for k, v in vars(usage).items() if not k.startswith("_")}


def _n(d: Mapping[str, Any] | None, key: str) -> int | None:
    if not d:
        return None
    v = d.get(key)
    return None if v is None else int(v)


def usage_request(context_id: str, usage: Any, model: str = "") -> pb.RecordUsageRequest:
    """The RecordUsageRequest for ``usage``; ``input_tokens`` counts every
    input token, cached or not (Anthropic's three counts added up)."""
    d = _as_dict(usage)
    req = pb.RecordUsageRequest(context_id=context_id, model=model)
    if any(k in d for k in _ANTHROPIC_CACHE):
        read = _n(d, "cache_read_input_tokens") or 0
        written = _n(d, "cache_creation_input_tokens") or 0
        req.input_tokens = (_n(d, "input_tokens") or 0) + read + written
        req.output_tokens = _n(d, "output_tokens") or 0
        req.cached_input_tokens, req.cache_write_tokens = read, written
        return req
    if "prompt_tokens" in d:  # Chat Completions
        req.input_tokens = _n(d, "prompt_tokens") or 0
        req.output_tokens = _n(d, "completion_tokens") or 0
        details = d.get("prompt_tokens_details")
    else:  # Responses, or just input and output counts
        req.input_tokens = _n(d, "input_tokens") or 0
        req.output_tokens = _n(d, "output_tokens") or 0
        details = d.get("input_tokens_details")
    if details is not None and not isinstance(details, Mapping):
        details = _as_dict(details)
    cached = _n(details, "cached_tokens")
    if cached is not None:
        req.cached_input_tokens = cached
    return req
