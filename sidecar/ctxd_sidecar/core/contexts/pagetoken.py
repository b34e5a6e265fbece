"""The page token of a context read: the one codec both pagers use.

A token is a tag naming the pager that wrote it (``p1.`` the transcript
pager of :mod:`.views`, ``j1.`` the provider pager of
:mod:`ctxd_sidecar.core.providers.pages`) and its parts, a JSON array,
base64url without padding. It comes back from the client, so
:func:`unpack` checks the frame (tag, length, encoding, a JSON array of the
pager's arity) and refuses anything else with INVALID_ARGUMENT naming
``page_token``; each pager then checks its parts' types and meaning.
"""

from __future__ import annotations

import base64
import binascii
import json
from functools import lru_cache

from ctxd_sidecar.core.errors import InvalidArgument

#: The transcript pager's tag (:mod:`.views`).
TRANSCRIPT = "p1."
#: The provider pager's tag (:mod:`ctxd_sidecar.core.providers.pages`).
PROVIDER = "j1."
#: Longest token accepted (every token ctxd writes is well under it).
MAX_TOKEN = 256


#: Tokens written and read lately, remembered: a long context read page by
#: page again meets the same ones (each entry is at most ``MAX_TOKEN`` long).
REMEMBERED = 4096


@lru_cache(maxsize=REMEMBERED, typed=True)  # typed: 1 and True are different tokens
def pack(tag: str, *parts: object) -> str:
    """A token of ``tag`` holding ``parts`` (JSON values, hashable ones)."""
    raw = json.dumps(parts, separators=(",", ":"))
    return tag + base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def bad() -> InvalidArgument:
    """The refusal of a token this read did not return."""
    return InvalidArgument("page_token", "is not a token this view returned; omit it to start over")


def unpack(token: str, tag: str, arity: int, optional: int = 0) -> tuple:
    """The parts of ``token`` (a token :func:`pack` wrote with ``tag``):
    ``arity`` of them, or up to ``optional`` more (from older tokens' absent
    ones); anything else is refused (:func:`bad`)."""
    if not token.startswith(tag) or len(token) > MAX_TOKEN:
        raise bad()
    parts = _parts(token[len(tag) :])
    if parts is None or not arity - optional <= len(parts) <= arity:
        raise bad()
    return parts


@lru_cache(maxsize=REMEMBERED)
def _parts(body: str) -> tuple | None:
    """The JSON array in ``body`` (None: not one)."""
    try:
        parts = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError, TypeError):
        return None
    return tuple(parts) if isinstance(parts, list) else None


def is_count(value: object) -> bool:
    """Whether a part is a non-negative int (bools and floats are not)."""
    return type(value) is int and value >= 0
