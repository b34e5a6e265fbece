"""Semantic search for ``CtxdStore``: LangGraph's ``index`` config over ctxd's
memory vectors and its Search RPC.

The embeddings object of the ``index`` config runs on the client (its sync
or async method, as the store is called); ``"embed": "ctxd"`` uses the
sidecar's embedder instead (``memory.embedder``). Each indexed field's text
(LangGraph's paths: ``"text"``, ``"a.b"``, ``"items[*].t"``, ``"$"``) is one
vector, named by its path (``path#1``, ``path#2``… for further texts at a
wildcard path). The sidecar ranks; items without vectors fill a page that
has room, unscored, as in LangGraph's ``InMemoryStore``.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

from langgraph.store.base import SearchItem, SearchOp
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path

#: ``index["embed"]`` that asks the sidecar's embedder.
SIDECAR = "ctxd"
#: Most hits asked when the filter must be applied on the client.
WIDE = 1000

Call = tuple[str, tuple, dict]


class StoreIndex:
    """An ``index`` config: which fields are embedded, and by what."""

    def __init__(self, index: dict) -> None:
        self.config = index
        # "text_fields": LangGraph's SQLite store's name for them
        self.fields = list(index.get("fields") or index.get("text_fields") or ["$"])
        self.sidecar = index.get("embed") == SIDECAR
        self.embeddings = None if self.sidecar else ensure_embeddings(index["embed"])

    def put_options(self, value: dict, fields: Any) -> Generator[Call, Any, dict]:
        """memory_set keywords for ``value`` (``fields``: the put's ``index``)."""
        if fields is False:
            return {}
        paths = self.fields if fields is None else list(fields)
        if self.sidecar:
            return {"embed_fields": ["v" if p == "$" else f"v.{p}" for p in paths]}
        names, texts = [], []
        for path in paths:
            for i, text in enumerate(get_text_at_path(value, path)):
                names.append(path if i == 0 else f"{path}#{i}")
                texts.append(text)
        if not texts:
            return {}
        vectors = yield ("embed_documents", (texts,), {})
        return {"vectors": dict(zip(names, vectors, strict=True))}

    def query(self, text: str) -> Generator[Call, Any, Any]:
        if self.sidecar:
            return text
        return (yield ("embed_query", (text,), {}))


def _simple(filter_: dict | None) -> bool:
    """Whether the sidecar's filter reads ``filter_`` as LangGraph does
    (equality, or $-operators); nested partial matches are checked here."""
    return all(
        not isinstance(v, dict) or all(k.startswith("$") for k in v)
        for v in (filter_ or {}).values()
    )


def vector_search(store: Any, op: SearchOp, keep: Any) -> Generator[Call, Any, list[SearchItem]]:
    """The items under the op's namespace prefix best matching ``op.query``;
    ``keep(item)`` applies the filter on the client."""
    query = yield from store._index.query(op.query)
    prefix = store._ns_path(tuple(op.namespace_prefix))
    simple = _simple(op.filter)
    kw = {"query": query, "include_values": True}
    if simple:
        kw.update(limit=op.limit, offset=op.offset)
        kw["filter"] = {f"v.{k}": v for k, v in (op.filter or {}).items()} or None
    else:
        kw["limit"] = WIDE
    hits = yield ("memory_search", (prefix,), kw)
    found = [_scored(store._item(h.record, SearchItem), h.score) for h in hits]
    if not simple:
        found = [i for i in found if keep(i)][op.offset : op.offset + op.limit]
    if len(found) < op.limit:
        records = yield ("memory_list", (prefix,), {"include_values": True})
        seen = {(i.namespace, i.key) for i in found}
        for record in records:
            if len(found) >= op.limit:
                break
            if json.loads(record.value_json).get("x"):
                continue  # has vectors: ranked by the sidecar
            item = store._item(record, SearchItem)
            if (item.namespace, item.key) not in seen and keep(item):
                found.append(item)
    return found


def _scored(item: SearchItem, score: float) -> SearchItem:
    return SearchItem(
        namespace=item.namespace,
        key=item.key,
        value=item.value,
        created_at=item.created_at,
        updated_at=item.updated_at,
        score=score,
    )


def run_sync(client: Any, index: StoreIndex | None, call: Call) -> Any:
    """One call of a batch: the embeddings run ``embed_*``, the client the rest."""
    target = index.embeddings if call[0].startswith("embed_") else client
    return getattr(target, call[0])(*call[1], **call[2])


async def run_async(client: Any, index: StoreIndex | None, call: Call) -> Any:
    if call[0].startswith("embed_"):
        return await getattr(index.embeddings, "a" + call[0])(*call[1], **call[2])
    return await getattr(client, call[0])(*call[1], **call[2])
