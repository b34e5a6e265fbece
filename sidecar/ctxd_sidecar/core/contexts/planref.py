"""The ``plan_ref`` PlanCompaction hands out: stateless, so any replica can
apply a plan another one made. It encodes the incarnation, the base version,
the folded prefix (first and last seq, count) and a hash of the folded ids."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass

from ctxd_sidecar.core.contexts.model import Msg
from ctxd_sidecar.core.errors import InvalidArgument

_REF_PREFIX = "cp1."


@dataclass(frozen=True)
class PlanRef:
    gen: str
    base: int
    first: int
    through: int
    count: int
    digest: str

    def encode(self) -> str:
        raw = json.dumps(
            [self.gen, self.base, self.first, self.through, self.count, self.digest],
            separators=(",", ":"),
        ).encode()
        return _REF_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> PlanRef:
        bad = InvalidArgument(
            "plan_ref", "is not a plan_ref PlanCompaction returned; plan the compaction again"
        )
        if not text.startswith(_REF_PREFIX) or len(text) > 512:
            raise bad
        body = text[len(_REF_PREFIX) :]
        try:
            gen, base, first, through, count, digest = json.loads(
                base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            )
        except (binascii.Error, ValueError, TypeError):
            raise bad from None
        # It comes back from the client: every part is checked before use.
        if not (
            isinstance(gen, str)
            and isinstance(digest, str)
            and all(type(v) is int and 0 <= v < 2**63 for v in (base, first, through, count))
        ):
            raise bad
        ref = cls(gen, base, first, through, count, digest)
        if ref.count < 1 or ref.first < 1 or ref.through < ref.first:
            raise bad
        return ref


def digest(folded: list[Msg]) -> str:
    h = hashlib.sha256()
    for m in folded:
        h.update(m.id.encode())
        h.update(b"\n")
    return h.hexdigest()[:32]
