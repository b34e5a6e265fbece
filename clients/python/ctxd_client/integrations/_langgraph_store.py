"""LangGraph's ``BaseStore`` over ctxd's MemoryService: ``CtxdStore``.

Every item is one memory key, ``PREFIX/<label>/<label>/!/<key>`` (labels
and key percent-encoded, so any text fits ctxd's key rules and ``!`` can
only be the separator; it sorts first, so a search lists a namespace's
items before those of its sub-namespaces), holding ``{"v": value, "c":
created_ms, "u": updated_ms, "t": ttl_minutes}`` (an item written without
``"u"`` reads the record's own ``updated_ms``). TTLs are ctxd's (absolute,
swept by the sidecar); a read that refreshes them writes the item again
unchanged (so ``updated_at`` stays, as in LangGraph's own stores) with the
same TTL, conditional on its version, so a refresh never overwrites a
concurrent put. Search without ``query`` lists the namespace prefix and
filters in the client; with ``query`` and an ``index`` config the item's
fields are embedded on put (``"x": 1`` marks an item with vectors) and the
sidecar's Search ranks them (:mod:`._langgraph_vectors`); namespaces are
derived from the keys. One batch is one round of
calls: reads first, then the puts, the last put of a key winning (as
LangGraph's own stores do).

A label or key whose encoding is longer than :data:`LONG` characters is
written as one segment ``!<digest>`` (SHA-256 of the text; percent-encoding
never starts a segment with ``!``), and the item's record keeps the
namespace and key as given (``"n"``, ``"k"``), from which they are read
back: any key LangGraph takes fits ctxd's 256-character keys, and a
namespace prefix still lists everything under it (the digest depends on the
label alone). A filter key with dots is a path into nested objects
(``{"user.access-level": ...}``), as LangGraph's SQLite and Postgres stores
read it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import math
import time
from collections.abc import Generator, Iterable
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, unquote

from langgraph.store.base import (
    NOT_PROVIDED,
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from ctxd_client import AsyncClient, Client
from ctxd_client._drive import adrive, drive
from ctxd_client.errors import Aborted, NotFound
from ctxd_client.integrations._langgraph_vectors import (
    StoreIndex,
    run_async,
    run_sync,
    vector_search,
)

#: The segment that ends a namespace (percent-encoding writes "!" as %21).
SEP = "!"

#: Encoded labels and keys longer than this are written as a digest segment.
LONG = 64

#: ctxd's longest memory key.
MAX_KEY = 256

#: One call: (client verb, positional args, keyword args).
Call = tuple[str, tuple, dict]

#: The errors of a call that the batch's ops handle (thrown into them).
HANDLED = (Aborted, NotFound)


def _enc(label: str, *, long: int = LONG) -> str:
    if label == "":
        return "%"  # no encoding of a non-empty text is a bare "%"
    text = quote(label, safe="").replace(".", "%2E")
    if len(text) <= long:
        return text
    return SEP + hashlib.sha256(label.encode()).hexdigest()[:48]


def _digested(segment: str) -> bool:
    return segment.startswith(SEP) and segment != SEP


def _dec(segment: str) -> str:
    return "" if segment == "%" else unquote(segment)


def _ms(dt_ms: int) -> datetime:
    return datetime.fromtimestamp(dt_ms / 1000, tz=timezone.utc)


def _matches(condition: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(ns) < len(path):
        return False
    if condition.match_type == "suffix":
        ns, path = ns[::-1], path[::-1]
    return all(p == "*" or k == p for k, p in zip(ns, path, strict=False))


def _at(value: Any, path: str) -> Any:
    """``value``'s field at a filter key: a dotted key is a path into nested objects."""
    for name in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value


def _compare(value: Any, wanted: Any) -> bool:
    """LangGraph's filter rule: nested equality and $eq/$ne/$gt/$gte/$lt/$lte."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(value, op, arg) for op, arg in wanted.items())
        return isinstance(value, dict) and all(_compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(_compare(a, b) for a, b in zip(value, wanted, strict=True))
        )
    return value == wanted


def _operator(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return value == arg
    if op == "$ne":
        return value != arg
    if value is None:
        return False
    compare = {"$gt": float.__gt__, "$gte": float.__ge__, "$lt": float.__lt__, "$lte": float.__le__}
    if op not in compare:
        raise ValueError(f"unsupported filter operator {op!r}")
    return compare[op](float(value), float(arg))


class CtxdStore(BaseStore):
    """A LangGraph store kept by a ctxd sidecar (shared by every replica)."""

    supports_ttl = True

    def __init__(
        self,
        client: Client | AsyncClient | str,
        *,
        prefix: str = "langgraph-store",
        ttl: TTLConfig | None = None,
        index: IndexConfig | None = None,
    ) -> None:
        """``client``: a :class:`Client` (sync calls), an :class:`AsyncClient`
        (async calls), or the sidecar's address; the other kind is opened on
        the same address when needed. ``prefix`` is the memory key prefix
        the store lives under; ``ttl`` LangGraph's TTL settings (minutes);
        ``index`` LangGraph's semantic search config (``embed``: embeddings
        run here, or ``"ctxd"`` for the sidecar's embedder; ``fields``)."""
        self.prefix = prefix.rstrip("/")
        self.ttl_config = ttl
        self.index_config = index
        self._index = None if index is None else StoreIndex(dict(index))
        #: The index's embeddings (None: none, or the sidecar's embedder).
        self.embeddings = None if self._index is None else self._index.embeddings
        self._address = client if isinstance(client, str) else client.address
        self._sync = client if isinstance(client, Client) else None
        self._async = client if isinstance(client, AsyncClient) else None
        self._async_loop: Any = None if self._async is None else "given"

    # -- keys --------------------------------------------------------------------------------
    def _ns_path(self, namespace: tuple[str, ...]) -> str:
        return "/".join([self.prefix, *(_enc(x) for x in namespace)]) + "/"

    def _key(self, namespace: tuple[str, ...], key: str) -> str:
        return f"{self._ns_path(namespace)}{SEP}/{_enc(key)}"

    def _legacy(self, namespace: tuple[str, ...], key: str) -> str | None:
        """The key an item had before long labels and keys were digested, when
        it differs and fitted ctxd's keys (such an item is read, and moved on
        its next put)."""
        labels = [_enc(x, long=MAX_KEY) for x in (*namespace, SEP, key)]
        labels[len(namespace)] = SEP
        old = "/".join([self.prefix, *labels])
        return old if len(old) <= MAX_KEY and old != self._key(namespace, key) else None

    def _split(self, full: str, doc: dict | None = None) -> tuple[tuple[str, ...], str]:
        """The namespace and key of a memory key (of a digested one, from its record ``doc``)."""
        parts = full[len(self.prefix) + 1 :].split("/")
        cut = parts.index(SEP)
        if doc is not None and "k" in doc:
            return tuple(doc["n"]), doc["k"]
        return tuple(_dec(p) for p in parts[:cut]), _dec("/".join(parts[cut + 1 :]))

    # -- one batch, whichever client runs it -----------------------------------------------------
    def _item(self, record: Any, cls: type[Item] = Item) -> Item:
        doc = json.loads(record.value_json)
        ns, key = self._split(record.key, doc)
        return cls(
            value=doc["v"],
            key=key,
            namespace=ns,
            created_at=_ms(int(doc.get("c", record.updated_ms))),
            updated_at=_ms(int(doc.get("u", record.updated_ms))),
        )

    def _refresh(self, record: Any) -> Call | None:
        ttl = json.loads(record.value_json).get("t")
        if not ttl or not record.expires_at_ms:
            return None
        kw = {"value_json": record.value_json, "ttl_seconds": _seconds(ttl)}
        return ("memory_set", (record.key,), {**kw, "expected_version": record.version})

    def _ops(self, ops: Iterable[Op]) -> Generator[Call, Any, list[Result]]:
        ops = list(ops)
        results: list[Result] = [None] * len(ops)
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):
                record = yield from self._get(op.namespace, op.key)
                if record is None:
                    continue
                results[i] = self._item(record)
                if op.refresh_ttl:
                    yield from self._try_refresh(record)
            elif isinstance(op, SearchOp):
                results[i] = yield from self._search(op)
            elif isinstance(op, ListNamespacesOp):
                results[i] = yield from self._namespaces(op)
            elif isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op
            else:
                raise ValueError(f"unknown store operation {type(op).__name__}")
        for (ns, key), op in puts.items():
            yield from self._put(ns, key, op)
        return results

    def _get(self, ns: tuple[str, ...], key: str) -> Generator[Call, Any, Any]:
        """The item's record (under its key as written before digests, too), or None."""
        for full in (self._key(ns, key), self._legacy(ns, key)):
            if full is None:
                continue
            try:
                return (yield ("memory_get", (full,), {}))
            except NotFound:
                pass
        return None

    def _try_refresh(self, record: Any) -> Generator[Call, Any, None]:
        call = self._refresh(record)
        if call is None:
            return
        try:
            yield call
        except (Aborted, NotFound):
            pass  # changed or gone meanwhile: that write decides its TTL

    def _put(self, ns: tuple[str, ...], key: str, op: PutOp) -> Generator[Call, Any, None]:
        full, legacy = self._key(ns, key), self._legacy(ns, key)
        if op.value is None:
            for k in (full, legacy) if legacy else (full,):
                yield ("memory_delete", (k,), {})
            return
        ttl = op.ttl
        if ttl is NOT_PROVIDED:
            ttl = (self.ttl_config or {}).get("default_ttl")
        now = int(time.time() * 1000)
        old = yield from self._get(ns, key)
        created = now if old is None else json.loads(old.value_json).get("c", old.updated_ms)
        doc = {"v": op.value, "c": created, "u": max(now, created), "t": ttl}
        if any(_digested(p) for p in full[len(self.prefix) + 1 :].split("/")):
            doc.update(n=list(ns), k=key)
        vectors = {}
        if self._index is not None:
            vectors = yield from self._index.put_options(op.value, op.index)
            if vectors:
                doc["x"] = 1
        value_json = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
        kw = {"value_json": value_json, "ttl_seconds": _seconds(ttl) if ttl else 0, **vectors}
        yield ("memory_set", (full,), kw)
        if old is not None and old.key != full:
            yield ("memory_delete", (old.key,), {})  # moved from its key before digests

    def _search(self, op: SearchOp) -> Generator[Call, Any, list[SearchItem]]:
        keep = functools.partial(_kept, op.filter)
        if op.query and self._index is not None:
            return (yield from vector_search(self, op, keep))
        prefix = self._ns_path(tuple(op.namespace_prefix))
        records = yield ("memory_list", (prefix,), {"include_values": True})
        found: list[SearchItem] = []
        hits = []
        for record in records:
            item = self._item(record, SearchItem)
            if not keep(item):
                continue
            found.append(item)
            hits.append(record)
        page = slice(op.offset, op.offset + op.limit)
        if op.refresh_ttl:
            for record in hits[page]:
                yield from self._try_refresh(record)
        return found[page]

    def _namespaces(self, op: ListNamespacesOp) -> Generator[Call, Any, list[tuple[str, ...]]]:
        records = yield ("memory_list", (self.prefix + "/",), {})
        if any(_digested(p) for r in records for p in r.key.split("/")):
            records = yield ("memory_list", (self.prefix + "/",), {"include_values": True})
            spaces = {self._split(r.key, json.loads(r.value_json))[0] for r in records}
        else:
            spaces = {self._split(r.key)[0] for r in records}
        if op.match_conditions:
            spaces = {s for s in spaces if all(_matches(c, s) for c in op.match_conditions)}
        if op.max_depth is not None:
            spaces = {s[: op.max_depth] for s in spaces}
        return sorted(spaces)[op.offset : op.offset + op.limit]

    # -- drivers ---------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        if self._sync is None:
            self._sync = Client(self._address)
        return drive(self._ops(ops), lambda c: run_sync(self._sync, self._index, c), HANDLED)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        client = self._aclient()
        return await adrive(self._ops(ops), lambda c: run_async(client, self._index, c), HANDLED)

    def _aclient(self) -> AsyncClient:
        if self._async_loop == "given":
            return self._async
        loop = asyncio.get_running_loop()
        if self._async is None or self._async_loop is not loop:
            self._async, self._async_loop = AsyncClient(self._address), loop
        return self._async

    def close(self) -> None:
        """Close the sync client the store opened."""
        if self._sync is not None:
            self._sync.close()


def _kept(filter_: dict | None, item: Item) -> bool:
    return not filter_ or all(_compare(_at(item.value, k), v) for k, v in filter_.items())


def _seconds(minutes: float) -> int:
    return max(1, math.ceil(float(minutes) * 60))
