"""Embedders: what turns a record's text, or a query, into vectors.

An embedder plugin (the ``ctxd_embedders`` hook) offers objects with a
``name`` and ``async embed(texts) -> list of vectors``; ``memory.embedder``
names the one the sidecar uses. The built-in ``openai`` embedder calls any
OpenAI-compatible ``/embeddings`` endpoint (``[embedder.openai]``).
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ctxd_sidecar.core.errors import FailedPrecondition, Unavailable
from ctxd_sidecar.core.memory.records import SearchRequest, SetRequest
from ctxd_sidecar.core.memory.vectors import check_vector, texts_at

_NONE = "no embedder is configured (memory.embedder); give vectors instead of text"


@runtime_checkable
class Embedder(Protocol):
    name: str

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order. Raise :class:`Unavailable` when the
        model cannot be reached (the caller may retry)."""
        ...


async def _embed(embedder: Embedder | None, texts: list[str]) -> list[array]:
    if embedder is None:
        raise FailedPrecondition(_NONE)
    got = await embedder.embed(texts)
    if len(got) != len(texts):
        raise Unavailable(
            f"embedder {embedder.name!r} answered {len(got)} vectors for {len(texts)} texts"
        )
    return [check_vector(v, f"embedder {embedder.name!r}'s vector") for v in got]


async def embed_fields(embedder: Embedder | None, request: SetRequest) -> dict[str, array]:
    """Vectors for the texts at ``request.embed_fields`` of the value: the
    first text at a path is named by the path, more by ``path#1``, ``path#2``…"""
    if embedder is None:
        raise FailedPrecondition(_NONE)
    value = json.loads(request.value_json)
    names: list[str] = []
    texts: list[str] = []
    for path in request.embed_fields:
        for i, text in enumerate(texts_at(value, path)):
            names.append(path if i == 0 else f"{path}#{i}")
            texts.append(text)
    if not texts:
        return {}
    return dict(zip(names, await _embed(embedder, texts), strict=True))


async def query_vector(embedder: Embedder | None, request: SearchRequest) -> array:
    if request.vector:
        return check_vector(list(request.vector), "query_vector")
    return (await _embed(embedder, [request.text]))[0]
