"""Memory's data: the records a caller sees, the Set request, and the stored form.

Stored record (key ``memory/<key>`` in the instance namespace) is one JSON
object, ``{"ts":…,"expires_at":…,"by":…,"value":<value>}``, where
``<value>`` is the caller's JSON text spliced in verbatim (never
re-serialised), and ``expires_at``/``by`` are omitted when unset. A record
with embedding vectors carries them in the header too, as
``"vec":{"<field>":"<base64 float32>",…}`` before ``"value"``
(:mod:`ctxd_sidecar.core.memory.vectors`).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field

from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.core.memory.vectors import Vectors, decode_vectors, encode_vectors

NAMESPACE = "memory"

_VALUE_MARK = b',"value":'


@dataclass(slots=True)
class MemoryRecord:
    key: str
    #: The value's JSON text exactly as set; None when listed without values.
    value_json: str | None
    version: str
    updated_ms: int
    #: Absolute expiry in ms since the epoch; 0 means never.
    expires_at_ms: int = 0
    by: str = ""


@dataclass(slots=True)
class MemoryPage:
    records: list[MemoryRecord]
    #: Empty on the last page.
    next_page_token: str = ""


@dataclass(frozen=True, slots=True)
class SetRequest:
    """One Set, as it travels from the RPC through validation to a backend."""

    key: str
    #: The value as JSON text; stored exactly as given.
    value_json: str
    #: 0: never expires.
    ttl_seconds: int = 0
    #: Write only if the record is at this version ("": any).
    expected_version: str = ""
    #: Write only if the key has no live record.
    create_only: bool = False
    #: Who wrote it (free text, shown back on reads).
    by: str = ""
    #: Embedding vectors by field path, given by the caller (float lists).
    vectors: dict[str, list[float]] = field(default_factory=dict)
    #: Field paths whose text the sidecar's embedder turns into vectors.
    embed_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One Search: rank the live records under ``prefix`` by similarity."""

    prefix: str = ""
    #: The query as text (embedded by the sidecar's embedder) ...
    text: str = ""
    #: ... or as a vector (exactly one of the two).
    vector: tuple[float, ...] = ()
    #: JSON object: field (dotted path) -> value, or {"$gt": …} style operators.
    filter_json: str = ""
    limit: int = 0
    offset: int = 0
    include_values: bool = False
    #: Only these fields' vectors count (empty: every field).
    fields: tuple[str, ...] = ()


@dataclass(slots=True)
class SearchHit:
    record: MemoryRecord
    score: float
    #: The field whose vector scored best.
    field: str


# -- record format -------------------------------------------------------------------
def encode_record(
    value: bytes, ts: int, expires_at: int, by: str, vectors: Vectors | None = None
) -> bytes:
    head = f'{{"ts":{ts}'
    if expires_at:
        head += f',"expires_at":{expires_at}'
    if by:
        head += ',"by":' + json.dumps(by, ensure_ascii=False)
    if vectors:
        head += ',"vec":' + encode_vectors(vectors)
    return b"".join((head.encode(), _VALUE_MARK, value, b"}"))


@dataclass(slots=True)
class StoredRecord:
    """A decoded record; ``value`` is the raw JSON bytes."""

    ts: int
    expires_at: int
    by: str
    value: bytes
    vectors: Vectors = field(default_factory=dict)

    def expired(self, now_ms: int) -> bool:
        return 0 < self.expires_at <= now_ms


def decode_record(raw: bytes) -> StoredRecord | None:
    """Parse a stored record; None if it is not one ctxd wrote."""
    # The marker cannot occur inside the header: in JSON strings '"' is escaped.
    i = raw.find(_VALUE_MARK)
    if i < 0 or raw[-1:] != b"}":
        return None
    value = raw[i + len(_VALUE_MARK) : -1]
    if raw.startswith(b'{"ts":'):
        # Fast path for the header encode_record writes (no JSON parse on Get).
        ts, _, rest = raw[6:i].partition(b",")
        expires = b"0"
        if rest.startswith(b'"expires_at":'):
            expires, _, rest = rest[13:].partition(b",")
        if not rest and ts.isdigit() and expires.isdigit():
            return StoredRecord(int(ts), int(expires), "", value)
    try:
        head = json.loads(raw[:i] + b"}")
        return StoredRecord(
            int(head["ts"]),
            int(head.get("expires_at", 0)),
            str(head.get("by", "")),
            value,
            decode_vectors(head.get("vec")),
        )
    except (ValueError, KeyError, TypeError):
        return None


# -- list paging ----------------------------------------------------------------------
def issue_page_token(prefix: str, last_key: str) -> str:
    raw = json.dumps([prefix, last_key], ensure_ascii=False, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def token_after(prefix: str, token: str) -> str:
    """The last key covered by a token :func:`issue_page_token` made for ``prefix``."""
    if not token:
        return ""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        tprefix, last = json.loads(raw)
        if not isinstance(tprefix, str) or not isinstance(last, str):
            raise ValueError
        last.encode()  # a key is valid Unicode (no lone surrogate)
    except (ValueError, binascii.Error, TypeError, RecursionError):
        raise InvalidArgument("page_token", "is not a token returned by a previous List") from None
    if tprefix != prefix:
        raise InvalidArgument("page_token", "was issued for a different prefix")
    return last
