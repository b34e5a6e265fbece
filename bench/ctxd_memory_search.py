"""Memory search: Search p50 at 1k, 10k and 100k records (384 dimensions).

For each size the same vectors (synthetic, clustered like sentence
embeddings: 1,000 centres plus noise, unit length) are searched, limit 10:

* ``ctxd.memory_search.n<N>``: ``MemoryService.Search`` over gRPC on a real
  ``ctxd`` (LMDB) whose records were written to the store beforehand, so the
  index is the one rebuilt at start (exact below
  ``memory.search_approx_threshold``, HNSW above);
* ``langgraph.inmemory.search.n<N>``: LangGraph's ``InMemoryStore`` with the
  same vectors (an ``index`` whose embeddings return them);
* ``floor.numpy.exact.n<N>``: one NumPy matrix product and partial sort, the
  floor any exact search pays.

At 100k: ``ctxd.memory_search.recall10``, recall@10 of the sidecar's answers
against exact search, and ``ctxd.memory_search.bytes_per_100k`` (the index's
vectors and graph); the checks ``target.memory_search.recall`` (>= 0.95) and
``target.memory_search.p50`` (<= 10 ms) read them. Quick mode: 500 and 2k.

Run alone: ``python -m bench --only memory_search``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from bench.harness import Context, Result, register, result_from_samples
from bench.procs import python_module_cmd, spawn
from bench.report import Report

GROUP = "memory_search"
DIMS = 384
SIZES = (1_000, 10_000, 100_000)
SIZES_QUICK = (500, 2_000)
QUERIES = 200
RECALL_TARGET = 0.95
P50_TARGET_MS = 10.0
K = 10


def vectors(n: int, seed: int = 7):
    import numpy as np

    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((1000, DIMS)).astype(np.float32)
    data = centres[rng.integers(0, 1000, n)] + 0.6 * rng.standard_normal((n, DIMS)).astype(
        np.float32
    )
    return data / np.linalg.norm(data, axis=1, keepdims=True)


def queries(data, count: int, seed: int = 11):
    import numpy as np

    rng = np.random.default_rng(seed)
    picked = data[rng.integers(0, len(data), count)]
    q = picked + 0.3 * rng.standard_normal(picked.shape).astype(np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def exact_top(data, q, k: int = K) -> list[int]:
    import numpy as np

    scores = data @ q
    top = np.argpartition(-scores, k)[:k]
    return top[np.argsort(-scores[top])].tolist()


async def _populate(uri: str, data) -> None:
    """Write the records as a sidecar stores them (value + vector)."""
    from array import array

    from ctxd_sidecar.core.memory import encode_record
    from ctxd_sidecar.core.storage import Storage
    from ctxd_sidecar.plugin.manager import open_store

    storage = Storage(open_store(uri))
    try:
        await storage.put("memory/_search", b'{"dims":384,"metric":"cosine"}')
        now = int(time.time() * 1000)
        for i, row in enumerate(data):
            value = f'{{"text":"doc {i}"}}'.encode()
            rec = encode_record(value, now, 0, "", {"text": array("f", row.tobytes())})
            await storage.put(f"memory/d/{i:07d}", rec)
    finally:
        await storage.close()


def _ctxd(ctx: Context, data, qs) -> tuple[list[int], list[list[str]]]:
    import grpc

    from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as pb
    from ctxd_sidecar.api.ctxd.v1 import memory_pb2_grpc

    uri = f"lmdb://{ctx.tmpdir(prefix='bench-search-')}?map_size=4GiB"
    asyncio.run(_populate(uri, data))
    cmd = python_module_cmd(
        "bench.ctxd_server", "--store", uri, "--set", "memory.max_keys=100000000"
    )
    with spawn(cmd, ready_timeout=600) as (_, port):
        channel = grpc.insecure_channel(f"127.0.0.1:{int(port)}")
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        times, answers = [], []
        try:
            for i, q in enumerate(qs):
                req = pb.SearchRequest(prefix="d/", query_vector=q.tolist(), limit=K)
                t0 = time.perf_counter_ns()
                hits = stub.Search(req, timeout=60).hits
                if i >= 10:  # warm-up
                    times.append(time.perf_counter_ns() - t0)
                answers.append([h.record.key for h in hits])
        finally:
            channel.close()
    return times, answers


def _langgraph(data, qs, samples: int) -> list[int]:
    from langgraph.store.memory import InMemoryStore

    by_text = {f"doc {i}": row.tolist() for i, row in enumerate(data)}
    pending = {}

    def embed(texts: list[str]) -> list[list[float]]:
        return [by_text.get(t) or pending[t] for t in texts]

    store = InMemoryStore(index={"dims": DIMS, "embed": embed, "fields": ["text"]})
    for i in range(len(data)):
        store.put(("d",), str(i), {"text": f"doc {i}"})
    times = []
    for i, q in enumerate(qs[:samples]):
        pending[f"q{i}"] = q.tolist()
        t0 = time.perf_counter_ns()
        store.search(("d",), query=f"q{i}", limit=K)
        times.append(time.perf_counter_ns() - t0)
    return times


def _floor(data, qs) -> list[int]:
    times = []
    for q in qs:
        t0 = time.perf_counter_ns()
        exact_top(data, q)
        times.append(time.perf_counter_ns() - t0)
    return times


def _index_bytes(data) -> int:
    from array import array

    from ctxd_sidecar.core.memory.vindex import VectorIndex

    index = VectorIndex("cosine")
    index.dims = DIMS
    index.load((f"d/{i}", "v", {"text": array("f", r.tobytes())}) for i, r in enumerate(data))
    return index.nbytes()


@register(GROUP)
def memory_search(ctx: Context) -> Iterator[Result]:
    sizes = ctx.pick(full=SIZES, quick=SIZES_QUICK)
    count = ctx.pick(full=QUERIES, quick=20)
    for n in sizes:
        data = vectors(n)
        qs = queries(data, count + 10)
        extra = {"records": n, "dims": DIMS, "limit": K}
        times, answers = _ctxd(ctx, data, qs)
        floor_name = f"floor.numpy.exact.n{n}"
        yield result_from_samples(
            times, name=f"ctxd.memory_search.n{n}", group=GROUP, ratio_to=floor_name, extra=extra
        )
        peer = _langgraph(data, qs, ctx.pick(full=max(10, 20_000_000 // (n * 100)), quick=10))
        yield result_from_samples(
            peer,
            name=f"langgraph.inmemory.search.n{n}",
            group=GROUP,
            ratio_to=floor_name,
            extra=extra,
        )
        yield result_from_samples(_floor(data, qs), name=floor_name, group=GROUP, extra=extra)
        if n == sizes[-1]:
            found = 0
            for q, got in zip(qs, answers, strict=True):
                want = {f"d/{i:07d}" for i in exact_top(data, q)}
                found += len(want & set(got))
            recall = found / (K * len(qs))
            yield Result(
                "ctxd.memory_search.recall10", GROUP, "ratio", recall, None, len(qs), extra
            )
            size = float(_index_bytes(data)) * 100_000 / n
            yield Result("ctxd.memory_search.bytes_per_100k", GROUP, "B", size, None, 1, extra)


def add_checks(report: Report) -> None:
    """Recall@10 and the p50 at the largest size (targets of the full run at 100k)."""
    by = {r.name: r for r in report.results}
    recall = by.get("ctxd.memory_search.recall10")
    sized = sorted(
        (r for r in report.results if r.name.startswith("ctxd.memory_search.n")),
        key=lambda r: r.extra.get("records", 0),
    )
    if recall is None or not sized:
        return
    largest = sized[-1]
    n = largest.extra["records"]
    report.add_check(
        "target.memory_search.recall",
        f"recall@10 of Search against exact search at {n} records",
        source=recall.name,
        value=recall.p50,
        op=">=",
        limit=RECALL_TARGET,
    )
    report.add_check(
        "target.memory_search.p50",
        f"Search p50 at {n} records, {DIMS} dimensions, LMDB",
        source=largest.name,
        value=largest.p50 / 1000,
        op="<=",
        limit=P50_TARGET_MS,
        unit="ms",
    )
