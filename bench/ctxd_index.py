"""Cost of creating a context on S3 without LIST, against how many exist.

A store that may not LIST keeps the names of a namespace in the paged key
index (:mod:`sidecar.core.keyindex`); creating a context adds its id there
(``KeyIndex.add``) and then writes its head. This measures that create at
1,000 and 10,000 existing contexts on moto's S3 server (real HTTP,
``list=false``):

* ``p50_ms``: one create (index add + head write, create-only);
* ``index_bytes``: bytes written to the index per create, averaged over the
  measured creates (page rewrites plus their share of splits and root writes);
* ``growth``: 10k / 1k for both (target <= 1.2).

The existing contexts are created through ``Storage`` + ``KeyIndex`` directly
(index entries only, which is all a create's cost depends on), not gRPC.

Run: ``python -m bench.ctxd_index`` (starts its own moto server).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

MARKS: tuple[int, ...] = (1_000, 10_000)
SAMPLES = 200
WARMUP = 10
NAMESPACE = "contexts"
GROWTH_TARGET = 1.2
#: A head of a fresh context: about the size the context store writes.
HEAD = json.dumps(
    {"v": 1, "id": "", "kind": "conversation", "version": 0, "created_ms": 0, "meta": {}}
).encode()


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 in server mode on a free loopback port."""
    import logging
    import socket

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def _moto_credentials() -> None:
    """moto accepts any credentials; boto3 still wants some."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "bench")


def _uri(endpoint: str, bucket: str) -> str:
    return f"s3://{bucket}/bench?endpoint_url={endpoint}&region=us-east-1&list=false"


async def _measure(endpoint: str, existing: int) -> dict:
    import boto3

    from sidecar.core.keyindex import KeyIndex
    from sidecar.core.storage import Storage
    from sidecar.plugins import open_store

    bucket = f"bench-index-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    storage = Storage(open_store(_uri(endpoint, bucket)))
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
        times: list[float] = []
        for i in range(WARMUP + SAMPLES):
            if i == WARMUP:
                written.clear()
            cid = f"ctx_{secrets.token_hex(8)}"
            started = time.perf_counter()
            await index.add(cid)
            await storage.put(f"{NAMESPACE}/{cid}", HEAD, if_absent=True)
            if i >= WARMUP:
                times.append(time.perf_counter() - started)
        pages = len((await index.pages.read_root()).ids)
        return {
            "existing": existing,
            "p50_ms": round(statistics.median(times) * 1000, 2),
            "index_bytes": round(sum(written) / SAMPLES),
            "pages": pages,
        }
    finally:
        await storage.close()


def run(endpoint: str | None = None) -> dict:
    """Measure at every mark; print and return the figures (starts moto if no endpoint)."""
    _moto_credentials()
    if endpoint is None:
        with moto_server() as ep:
            return run(ep)
    rows = {str(mark): asyncio.run(_measure(endpoint, mark)) for mark in MARKS}
    lo, hi = rows[str(MARKS[0])], rows[str(MARKS[-1])]
    out = {
        "rows": rows,
        "growth_p50": round(hi["p50_ms"] / lo["p50_ms"], 2),
        "growth_bytes": round(hi["index_bytes"] / lo["index_bytes"], 2),
        "target": GROWTH_TARGET,
    }
    for row in rows.values():
        print(
            f"ctxd.index.create.s3-nolist.n{row['existing']}: p50 {row['p50_ms']} ms, "
            f"{row['index_bytes']} index bytes/create, {row['pages']} pages"
        )
    print(
        f"growth {MARKS[0]} -> {MARKS[-1]}: p50 {out['growth_p50']}x, "
        f"bytes {out['growth_bytes']}x (target <= {GROWTH_TARGET}x)"
    )
    return out


if __name__ == "__main__":
    run()
