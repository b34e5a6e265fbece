"""ListContexts: pages of contexts in id order, from the key index.

A listed context that is resident answers from memory; any other from its
head and log tail, without reading its segments (a tail holding an op that
needs the messages falls back to a full restore).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re

from ctxd_sidecar.core.contexts import validate
from ctxd_sidecar.core.contexts.model import CONVERSATION, ROOT, ROOT_ID, ContextInfo
from ctxd_sidecar.core.contexts.persistence import Damaged
from ctxd_sidecar.core.contexts.service import ContextService
from ctxd_sidecar.core.errors import InvalidArgument
from ctxd_sidecar.plugin.store import Item

log = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


#: What an id prefix may hold: the context id alphabet.
_ID_CHARS = re.compile(r"[A-Za-z0-9._:-]+")


class Listing:
    """Listing over a :class:`ContextService`."""

    def __init__(self, contexts: ContextService) -> None:
        self.contexts = contexts

    async def info(self, context_id: str) -> ContextInfo:
        return (await self.contexts.get(context_id)).info()

    async def page(
        self,
        page_size: int = 0,
        page_token: str = "",
        kind: str = "",
        include_archived: bool = False,
        *,
        id_prefix: str = "",
    ) -> tuple[list[ContextInfo], str]:
        """One page of contexts in id order, and the token of the next ("" at
        the end); ``id_prefix``: only ids starting with it."""
        if page_size < 0:
            raise InvalidArgument("page_size", "must not be negative")
        size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        after = decode_token(page_token)
        if id_prefix:
            validate.bounded(id_prefix, "id_prefix", 128)
            if not _ID_CHARS.fullmatch(id_prefix):
                raise InvalidArgument(
                    "id_prefix", "must be characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"
                )
        if kind == ROOT:
            if after or not ROOT_ID.startswith(id_prefix):
                return [], ""
            return [await self.info(ROOT_ID)], ""
        await self.contexts.ensure_root()
        out: list[ContextInfo] = []
        exhausted = False
        while len(out) < size:
            want = size - len(out)
            batch = await self.contexts.heads(id_prefix, after, want)
            infos = await asyncio.gather(*(self.listed(name, item) for name, item in batch))
            for (name, _), info in zip(batch, infos, strict=True):
                after = name
                if info is None or (info.archived and not include_archived):
                    continue
                if kind == CONVERSATION and info.kind != CONVERSATION:
                    continue
                out.append(info)
            if len(batch) < want:
                exhausted = True
                break
        return out, "" if exhausted else encode_token(after)

    async def listed(self, cid: str, item: Item) -> ContextInfo | None:
        """Info of a listed context: from memory if resident (unless other
        replicas may have changed it), else from its head and log tail (no
        segments)."""
        try:
            st = await self.contexts.listed(cid, item)
        except Damaged as exc:
            log.error("context skipped in listing", extra={"context": cid, "error": str(exc)})
            return None
        return st.info() if st is not None and st.exists else None


def encode_token(after: str) -> str:
    return base64.urlsafe_b64encode(f"after:{after}".encode()).decode().rstrip("=")


def decode_token(token: str) -> str:
    if not token:
        return ""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    if not raw.startswith("after:") or not validate.CONTEXT_ID_RE.fullmatch(raw[6:]):
        raise InvalidArgument(
            "page_token", "is not a token this service returned; omit it to start over"
        )
    return raw[6:]
