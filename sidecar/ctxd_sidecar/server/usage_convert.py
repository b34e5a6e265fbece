"""Prompt-cache figures to their messages (RecordUsage, CompactionRecord, Context)."""

from __future__ import annotations

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.core.contexts.archive import CompactionInfo
from ctxd_sidecar.core.contexts.cacheuse import CacheUsage


def cache_cost_pb(r: CompactionInfo) -> pb.CompactionCacheCost:
    out = pb.CompactionCacheCost(predicted_write_tokens=r.predicted_writes)
    if r.reported is not None:
        out.reported = True
        out.cache_write_tokens, out.cached_input_tokens, out.input_tokens = r.reported
    return out


def cache_usage_pb(u: CacheUsage) -> pb.CacheUsage:
    return pb.CacheUsage(
        reports=u.reports,
        input_tokens=u.input,
        cached_input_tokens=u.cached,
        cache_write_tokens=u.written,
        cache_read_share=u.share,
    )
