"""Cost of creating a context on S3 without LIST, against how many exist.

A store that may not LIST keeps the names of a namespace in the paged key
index (:mod:`ctxd_sidecar.core.keyindex`); creating a context adds its id there
(``KeyIndex.add``) and then writes its head. This measures that create at
1,000 and 10,000 existing contexts on moto's S3 server (real HTTP,
``list=false``):

* ``p50_ms``: one create (index add + head write, create-only);
* ``index_bytes``: bytes written to the index per create, averaged over the
  measured creates (page rewrites plus their share of splits and root writes);
* ``growth``: 10k / 1k for both (target <= 1.2).

The existing contexts are created through ``Storage`` + ``KeyIndex`` directly
(index entries only, which is all a create's cost depends on), not gRPC.

In the suite (group ``index``) the rows are ``ctxd.index.create.s3-nolist.n<mark>``
(µs) and ``ctxd.index.bytes_per_create.s3-nolist.n<mark>`` (B); ``bench.compare``
derives the growth. Quick mode measures at 100 and 1,000 (no growth row).

Run alone: ``python -m bench.ctxd_index`` (starts its own moto server).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import statistics
import time
import uuid
from collections.abc import Iterator

from bench.harness import Context, Result, register, result_from_samples
from bench.moto_s3 import create_bucket, credentials, moto_server, store_uri

GROUP = "index"
MARKS: tuple[int, ...] = (1_000, 10_000)
MARKS_QUICK: tuple[int, ...] = (100, 1_000)
SAMPLES = 200
SAMPLES_QUICK = 30
WARMUP = 10
NAMESPACE = "contexts"
GROWTH_TARGET = 1.2
#: A head of a fresh context: about the size the context store writes.
HEAD = json.dumps(
    {"v": 1, "id": "", "kind": "conversation", "version": 0, "created_ms": 0, "meta": {}}
).encode()


async def _measure(endpoint: str, existing: int, samples: int = SAMPLES) -> dict:
    from ctxd_sidecar.core.keyindex import KeyIndex
    from ctxd_sidecar.core.storage import Storage
    from ctxd_sidecar.plugin.manager import open_store

    bucket = f"bench-index-{uuid.uuid4().hex[:8]}"
    create_bucket(endpoint, bucket)
    storage = Storage(open_store(store_uri(endpoint, bucket, "bench", list="false")))
    index = KeyIndex(storage, NAMESPACE)
    written: list[int] = []
    real_put = storage.put

    async def counting_put(key, value, **kw):
        if key.startswith(f"{NAMESPACE}/_index"):
            written.append(len(value))
        return await real_put(key, value, **kw)

    storage.put = counting_put  # type: ignore[method-assign]
    try:
        # Populate: concurrent adds share index writes (group commit).
        await asyncio.gather(*(index.add(f"ctx_{secrets.token_hex(8)}") for _ in range(existing)))
        times: list[int] = []
        for i in range(WARMUP + samples):
            if i == WARMUP:
                written.clear()
            cid = f"ctx_{secrets.token_hex(8)}"
            started = time.perf_counter_ns()
            await index.add(cid)
            await storage.put(f"{NAMESPACE}/{cid}", HEAD, if_absent=True)
            if i >= WARMUP:
                times.append(time.perf_counter_ns() - started)
        pages = len((await index.pages.read_root()).ids)
        return {
            "existing": existing,
            "p50_ms": round(statistics.median(times) / 1e6, 2),
            "index_bytes": round(sum(written) / samples),
            "pages": pages,
            "samples_ns": times,
        }
    finally:
        await storage.close()


def run(
    endpoint: str | None = None,
    marks: tuple[int, ...] = MARKS,
    samples: int = SAMPLES,
    echo: bool = True,
) -> dict:
    """Measure at every mark; print and return the figures (starts moto if no endpoint)."""
    credentials()
    if endpoint is None:
        with moto_server() as ep:
            return run(ep, marks, samples, echo)
    rows = {str(mark): asyncio.run(_measure(endpoint, mark, samples)) for mark in marks}
    lo, hi = rows[str(marks[0])], rows[str(marks[-1])]
    out = {
        "rows": rows,
        "growth_p50": round(hi["p50_ms"] / lo["p50_ms"], 2),
        "growth_bytes": round(hi["index_bytes"] / lo["index_bytes"], 2),
        "target": GROWTH_TARGET,
    }
    if not echo:  # the suite reports rows itself
        return out
    for row in rows.values():
        print(
            f"{create_name(row['existing'])}: p50 {row['p50_ms']} ms, "
            f"{row['index_bytes']} index bytes/create, {row['pages']} pages"
        )
    print(
        f"growth {marks[0]} -> {marks[-1]}: p50 {out['growth_p50']}x, "
        f"bytes {out['growth_bytes']}x (target <= {GROWTH_TARGET}x)"
    )
    return out


def create_name(mark: int) -> str:
    return f"ctxd.index.create.s3-nolist.n{mark}"


def bytes_name(mark: int) -> str:
    return f"ctxd.index.bytes_per_create.s3-nolist.n{mark}"


@register(GROUP)
def index_suite(ctx: Context) -> Iterator[Result]:
    """One create's p50 and index bytes per create at each mark."""
    marks = ctx.pick(full=MARKS, quick=MARKS_QUICK)
    figures = run(None, marks, ctx.pick(full=SAMPLES, quick=SAMPLES_QUICK), echo=False)
    common = {"store": "s3 (moto server, list=false)", "create": "KeyIndex.add + head put"}
    for mark in marks:
        row = figures["rows"][str(mark)]
        extra = {**common, "existing": mark, "pages": row["pages"]}
        samples = row["samples_ns"]
        yield result_from_samples(samples, name=create_name(mark), group=GROUP, extra=extra)
        yield Result(
            bytes_name(mark), GROUP, "B", float(row["index_bytes"]), None, len(samples), extra
        )


if __name__ == "__main__":
    run()
