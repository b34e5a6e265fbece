"""Request rules every memory backend relies on: keys, prefixes, Set and List arguments."""

from __future__ import annotations

import dataclasses
import re
from array import array

from ctxd_sidecar.config import MemoryConfig
from ctxd_sidecar.core.errors import InvalidArgument, LimitExceeded
from ctxd_sidecar.core.jsonvalue import validate_json
from ctxd_sidecar.core.memory.records import SearchRequest, SetRequest
from ctxd_sidecar.core.memory.vectors import MAX_VECTORS, check_field_name, check_vector

#: Longest key, in characters (the store may also bound its bytes).
MAX_KEY_CHARS = 256
#: Longest ``by`` (author) text, in characters.
MAX_BY_CHARS = 256
#: Longest expected_version accepted (versions are short opaque strings).
MAX_VERSION_CHARS = 256
#: Longest TTL accepted: 100 years, in seconds.
MAX_TTL_SECONDS = 100 * 365 * 24 * 3600
DEFAULT_LIST_LIMIT = 100
DEFAULT_SEARCH_LIMIT = 10
#: Most records one Search skips (offset) or returns (limit).
MAX_SEARCH_OFFSET = 10_000
#: Larger page sizes are reduced to this.
MAX_LIST_LIMIT = 1000

_KEY_BAD_CHAR = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")
_TEXT_BAD_CHAR = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def validate_key(key: str, field: str = "key") -> None:
    """Key rules: 1-256 characters, no leading ``_``, no whitespace or control
    characters, no empty, ``.`` or ``..`` segments between ``/``."""
    if not key:
        raise InvalidArgument(field, "must not be empty")
    if len(key) > MAX_KEY_CHARS:
        raise InvalidArgument(field, f"is {len(key)} characters; at most {MAX_KEY_CHARS}")
    if key[0] == "_":
        raise InvalidArgument(field, 'must not start with "_" (reserved)')
    bad = _KEY_BAD_CHAR.search(key)
    if bad:
        raise InvalidArgument(
            field, f"must not contain whitespace or control characters (found {bad.group()!r})"
        )
    padded = f"/{key}/"
    if "//" in padded:
        raise InvalidArgument(field, 'must not have empty segments (leading, trailing or "//")')
    if "/./" in padded or "/../" in padded:
        raise InvalidArgument(field, 'must not have "." or ".." segments')


def validate_prefix(prefix: str) -> None:
    """A list prefix is any start of a valid key (so it may end in ``/``)."""
    if not prefix:
        return
    if len(prefix) > MAX_KEY_CHARS:
        raise InvalidArgument("prefix", f"is {len(prefix)} characters; at most {MAX_KEY_CHARS}")
    if prefix[0] == "_":
        raise InvalidArgument("prefix", 'must not start with "_" (reserved)')
    if _KEY_BAD_CHAR.search(prefix):
        raise InvalidArgument("prefix", "must not contain whitespace or control characters")
    padded = f"/{prefix}"
    if "//" in padded or "/./" in padded or "/../" in padded:
        raise InvalidArgument("prefix", 'must not have empty, "." or ".." segments')


def validate_version(version: str) -> None:
    if len(version) > MAX_VERSION_CHARS:
        raise InvalidArgument("expected_version", "is not a version returned by Get or Set")


def validate_set(request: SetRequest, config: MemoryConfig) -> None:
    """Every rule a Set must pass before a backend sees it (key, TTL, version,
    author, the value-size cap, strict JSON)."""
    validate_key(request.key)
    ttl_seconds = request.ttl_seconds
    if ttl_seconds < 0:
        raise InvalidArgument("ttl_seconds", "must be 0 (never expires) or a positive number")
    if ttl_seconds > MAX_TTL_SECONDS:
        raise InvalidArgument("ttl_seconds", f"must be at most {MAX_TTL_SECONDS} (100 years)")
    if request.expected_version and request.create_only:
        raise InvalidArgument("create_only", "cannot be combined with expected_version")
    validate_version(request.expected_version)
    by = request.by
    if len(by) > MAX_BY_CHARS:
        raise InvalidArgument("by", f"is {len(by)} characters; at most {MAX_BY_CHARS}")
    if by and _TEXT_BAD_CHAR.search(by):
        raise InvalidArgument("by", "must not contain control characters or line breaks")
    size = len(request.value_json.encode())
    cap = config.max_value_bytes
    if size > cap:
        raise LimitExceeded(
            "memory.max_value_bytes",
            cap,
            f"value is {size} bytes; memory.max_value_bytes is {cap}",
        )
    validate_json(request.value_json, max_depth=config.max_depth)


def list_limit(limit: int) -> int:
    """The page size a List asks for: 0 is the default, larger ones are capped."""
    if limit < 0:
        raise InvalidArgument("limit", f"must be 0 (default {DEFAULT_LIST_LIMIT}) or positive")
    return min(limit or DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)


def validate_vectors(vectors: dict, embed_fields: tuple[str, ...]) -> dict[str, array]:
    """A Set's vectors as float32 arrays, each field named once."""
    if len(vectors) + len(embed_fields) > MAX_VECTORS:
        raise InvalidArgument("vectors", f"at most {MAX_VECTORS} vectors per record")
    out: dict[str, array] = {}
    for name, values in vectors.items():
        check_field_name(name, "vectors")
        out[name] = check_vector(values, f"vectors[{name}]")
    for name in embed_fields:
        check_field_name(name, "embed_fields")
        if name in out:
            raise InvalidArgument("embed_fields", f"field {name!r} also has a vector given")
    return out


def validate_search(request: SearchRequest) -> SearchRequest:
    """A Search's arguments checked, with the default limit filled in."""
    validate_prefix(request.prefix)
    if bool(request.text) == bool(request.vector):
        raise InvalidArgument("query", "give exactly one of query_text and query_vector")
    if request.limit < 0:
        raise InvalidArgument("limit", f"must be 0 (default {DEFAULT_SEARCH_LIMIT}) or positive")
    if not 0 <= request.offset <= MAX_SEARCH_OFFSET:
        raise InvalidArgument("offset", f"must be between 0 and {MAX_SEARCH_OFFSET}")
    for name in request.fields:
        check_field_name(name, "fields")
    limit = min(request.limit or DEFAULT_SEARCH_LIMIT, MAX_LIST_LIMIT)
    return dataclasses.replace(request, limit=limit)
