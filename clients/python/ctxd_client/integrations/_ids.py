"""Framework ids (any text) as ctxd ids (1-128 of ``[A-Za-z0-9._:-]``)."""

from __future__ import annotations

import hashlib
import re

_SAFE = re.compile(r"[A-Za-z0-9.:-]")
_MAX = 128


def context_id(name: str, prefix: str = "") -> str:
    """``prefix + name`` as a context id: characters outside the id alphabet
    (and ``_``) written as ``_XX`` per UTF-8 byte, so distinct names stay
    distinct; a result too long, or not starting with a letter or digit,
    becomes a hash (still under ``prefix``, so listing by prefix finds it)."""
    encoded = "".join(
        ch if _SAFE.fullmatch(ch) else "".join(f"_{b:02x}" for b in ch.encode()) for ch in name
    )
    out = prefix + encoded
    if len(out) > _MAX or not out[:1].isalnum() or not out.isascii():
        digest = hashlib.sha256(name.encode()).hexdigest()[:40]
        out = f"{prefix}h-{digest}" if prefix[:1].isalnum() else f"h-{digest}"
    return out
