"""Embedding vectors of memory records: their rules, stored form and scores.

A record may carry one vector per indexed field (a path into its JSON value,
as LangGraph's ``fields``: ``"text"``, ``"a.b"``, ``"items[0]"``,
``"items[*]"``, ``"$"`` for the whole value). They are stored inside the
record (see :mod:`ctxd_sidecar.core.memory.records`) as little-endian
float32, base64, so TTL, caps, deletes, replication and ``migrate`` cover
them with the value.

Metrics: ``cosine`` (score = cosine similarity), ``dot`` (inner product) and
``l2`` (score = -euclidean distance); higher is always better.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import sys
from array import array
from typing import Any

from ctxd_sidecar.core.errors import InvalidArgument

METRICS = ("cosine", "dot", "l2")
#: Most dimensions a vector may have.
MAX_DIMS = 4096
#: Most vectors (indexed fields) one record may carry.
MAX_VECTORS = 64
MAX_FIELD_CHARS = 256

Vectors = dict[str, array]


def check_vector(values: list[float] | array, field: str) -> array:
    """``values`` as float32, refusing empty, too long or non-finite vectors."""
    if not values:
        raise InvalidArgument(field, "must have at least one dimension")
    if len(values) > MAX_DIMS:
        raise InvalidArgument(field, f"has {len(values)} dimensions; at most {MAX_DIMS}")
    vec = array("f", values)
    if not all(math.isfinite(x) for x in vec):
        raise InvalidArgument(field, "must hold finite numbers (no NaN or infinity)")
    return vec


def check_dims(vec: array, dims: int, field: str) -> None:
    if dims and len(vec) != dims:
        raise InvalidArgument(
            field, f"has {len(vec)} dimensions; the memory search index has {dims}"
        )


def check_field_name(name: str, field: str) -> None:
    if not name or len(name) > MAX_FIELD_CHARS or any(c.isspace() for c in name):
        raise InvalidArgument(
            field, f"field path {name[:40]!r} must be 1-{MAX_FIELD_CHARS} characters, no spaces"
        )


# -- stored form ----------------------------------------------------------------------
def encode_vectors(vectors: Vectors) -> str:
    """The JSON object text stored in a record's header."""
    out = {}
    for name, vec in vectors.items():
        le = vec if sys.byteorder == "little" else _swapped(vec)
        out[name] = base64.b64encode(le.tobytes()).decode()
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def decode_vectors(obj: Any) -> Vectors:
    """The vectors of a stored header object (``{}`` when unusable)."""
    if not isinstance(obj, dict):
        return {}
    out: Vectors = {}
    for name, text in obj.items():
        try:
            vec = array("f")
            vec.frombytes(base64.b64decode(text))
        except (TypeError, ValueError, binascii.Error):
            continue
        out[name] = vec if sys.byteorder == "little" else _swapped(vec)
    return out


def _swapped(vec: array) -> array:
    out = array("f", vec)
    out.byteswap()
    return out


# -- scores (pure Python; the index uses NumPy when it is installed) -------------------
def score(metric: str, query: array, vec: array, query_norm: float | None = None) -> float:
    if metric == "l2":
        return -math.sqrt(sum((a - b) * (a - b) for a, b in zip(query, vec, strict=True)))
    dot = math.fsum(a * b for a, b in zip(query, vec, strict=True))
    if metric == "dot":
        return dot
    qn = query_norm if query_norm is not None else norm(query)
    vn = norm(vec)
    return dot / (qn * vn) if qn and vn else 0.0


def norm(vec: array) -> float:
    return math.sqrt(math.fsum(x * x for x in vec))


# -- texts of fields (for the sidecar's embedder) --------------------------------------
_TOKEN = re.compile(r"([^.\[\]]+)|\[(\*|-?\d+)\]")


def texts_at(value: Any, path: str) -> list[str]:
    """The texts at ``path`` in ``value`` (strings as they are, anything else as
    JSON); empty when the path is absent."""
    if path in ("$", ""):
        nodes = [value]
    else:
        nodes = [value]
        for m in _TOKEN.finditer(path):
            nodes = list(_step(nodes, m.group(1), m.group(2)))
    return [n if isinstance(n, str) else json.dumps(n, ensure_ascii=False) for n in nodes]


def _step(nodes: list[Any], name: str | None, index: str | None):
    for node in nodes:
        if name is not None:
            if isinstance(node, dict) and name in node:
                yield node[name]
        elif isinstance(node, list):
            if index == "*":
                yield from node
            elif -len(node) <= int(index) < len(node):
                yield node[int(index)]


def matches(value: Any, filter_: dict[str, Any]) -> bool:
    """Equality on top-level fields (dotted paths reach into objects)."""
    if not isinstance(value, dict):
        return not filter_
    for path, want in filter_.items():
        node: Any = value
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        if not _compare(node, want):
            return False
    return True


_OPS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def _compare(node: Any, want: Any) -> bool:
    if isinstance(want, dict) and want and all(k in _OPS for k in want):
        try:
            return all(_OPS[op](node, arg) for op, arg in want.items())
        except TypeError:
            return False
    return node == want
