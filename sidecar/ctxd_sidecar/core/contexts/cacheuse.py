"""A conversation's provider prompt-cache figures, from RecordUsage.

A runtime that reports the provider's usage with its cache token counts
(OpenAI ``prompt_tokens_details.cached_tokens``; Anthropic
``cache_read_input_tokens`` and ``cache_creation_input_tokens``) moves
three raw sums: input tokens, input tokens read from the cache, input
tokens written to it. Their ratio, the cache-read share, is derived; the
sums are kept so a dashboard can add conversations up.

Each compaction predicts what it costs the cache (its ``CacheEffect``:
``tokens_rewritten`` are read anew, so written to the cache, on the next
call). The first report with cache counts after a compaction is kept
against it (:attr:`CacheUsage.after`, by compaction id, the last
:data:`KEPT`), so prediction and bill can be compared.

The figures ride with the calibration (:class:`~.tokens.Calibration`): in
the head, and on the first log record after a report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxd_sidecar.core.errors import InvalidArgument

#: Compactions whose reported cache cost is kept (the latest; it rides on
#: log records, so it stays small).
KEPT = 16


def check(input_tokens: int, cached: int | None, written: int | None) -> None:
    """Refuse counts no provider reports (negative, or more than the input)."""
    for name, v in (("cached_input_tokens", cached), ("cache_write_tokens", written)):
        if v is not None and v < 0:
            raise InvalidArgument(
                name,
                f"must not be negative (got {v}): a count of the input_tokens the "
                "provider's prompt cache served or took; leave it unset when unknown",
            )
    c, w = cached or 0, written or 0
    if c > input_tokens:
        raise InvalidArgument(
            "cached_input_tokens",
            f"{c} is more than input_tokens {input_tokens}: input_tokens counts every "
            "input token, cached or not (for Anthropic, input_tokens + "
            "cache_read_input_tokens + cache_creation_input_tokens)",
        )
    if c + w > input_tokens:
        raise InvalidArgument(
            "cache_write_tokens",
            f"cached_input_tokens {c} + cache_write_tokens {w} is more than input_tokens "
            f"{input_tokens}: input_tokens counts every input token, cached, written or "
            "neither",
        )


@dataclass(slots=True)
class CacheUsage:
    """Raw cache sums for one conversation (see the module docstring)."""

    reports: int = 0
    input: int = 0
    cached: int = 0
    written: int = 0
    #: compaction id -> [cache writes, cached input, input] of the first
    #: report after it.
    after: dict[str, list[int]] = field(default_factory=dict)

    @property
    def share(self) -> float:
        return self.cached / self.input if self.input else 0.0

    def observe(self, input_tokens: int, cached: int, written: int, last_compaction: str) -> bool:
        """Add one report; True when it is the first after ``last_compaction``."""
        self.reports += 1
        self.input += input_tokens
        self.cached += cached
        self.written += written
        if last_compaction and last_compaction not in self.after:
            self.after[last_compaction] = [written, cached, input_tokens]
            while len(self.after) > KEPT:
                del self.after[next(iter(self.after))]
            return True
        return False

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.reports,
            "in": self.input,
            "read": self.cached,
            "write": self.written,
            "after": self.after,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> CacheUsage:
        if not d:
            return cls()
        after = {str(k): [int(x) for x in v] for k, v in (d.get("after") or {}).items()}
        return cls(int(d["n"]), int(d["in"]), int(d["read"]), int(d["write"]), after)
