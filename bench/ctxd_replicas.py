"""Two ctxd replicas on one S3 bucket: what reading and writing across them costs.

Two real ctxd processes (``python -m bench.ctxd_server``, as in
``bench.ctxd_contexts``) share one bucket on moto's S3 server (real HTTP). A
read on a shared store reflects every write any replica acknowledged: it
costs one probe of the next log record, plus reading it when another
replica wrote. ``consistency=READ_CONSISTENCY_CACHED`` skips the probe and
may lag. Appends from both replicas to one context each start from a copy
the other made stale. Rows (µs; the ratio column compares each pair):

* ``ctxd.replicas.get_info.latest_after_write``: GetContext(INFO) on B right
  after an AppendTurn on A (B catches up; checked to show A's version);
* ``ctxd.replicas.get_info.cached``: GetContext(INFO, CACHED) on B in the
  same position (may show an older version);
* ``ctxd.replicas.append_turn.alternating``: AppendTurn on one context,
  alternately on A and on B;
* ``ctxd.replicas.append_turn.one_replica``: AppendTurn on another context,
  always on A (interleaved with the alternating turns, so load hits both).

Every context holds ``HISTORY`` messages of 1 KB before the measurement;
turns are 1 user + 1 assistant message of 1 KB each, as in the other suites.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from bench.ctxd_contexts import Bench
from bench.ctxd_rpc import CALL_TIMEOUT_S, open_channel, sidecar_cmd
from bench.harness import Context, Result, register, result_from_samples
from bench.moto_s3 import create_bucket, moto_server, store_uri
from bench.procs import spawn

GROUP = "replicas"
BUCKET = "bench-replicas"
HISTORY = 1_000
#: Retries of a turn that lost a race to the other replica (UNAVAILABLE).
RETRIES = 10


def _turn(b: Bench, cid: str, key: str, retried: list[int]) -> int:
    """One AppendTurn with an idempotency key, retried on UNAVAILABLE; returns the version."""
    import grpc

    req = b.pb.AppendTurnRequest(
        context_id=cid, messages=[b.user, b.assistant], idempotency_key=key
    )
    for _ in range(RETRIES):
        try:
            return b.stub.AppendTurn(req, timeout=CALL_TIMEOUT_S).version
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            retried[0] += 1
    raise RuntimeError(f"{cid}: turn {key} not acknowledged after {RETRIES} tries")


def _info(b: Bench, cid: str, cached: bool):
    pb = b.pb
    consistency = pb.READ_CONSISTENCY_CACHED if cached else pb.READ_CONSISTENCY_LATEST
    req = pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_INFO, consistency=consistency)
    return b.stub.GetContext(req, timeout=CALL_TIMEOUT_S).info


@register(GROUP)
def replicas(ctx: Context) -> Iterator[Result]:
    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc

    n = ctx.pick(full=200, quick=20)
    history = ctx.pick(full=HISTORY, quick=100)
    with moto_server() as endpoint:
        create_bucket(endpoint, BUCKET)
        cmd = sidecar_cmd(store_uri(endpoint, BUCKET))
        with spawn(cmd) as (_, port_a), spawn(cmd) as (_, port_b):
            channels = [open_channel(port_a), open_channel(port_b)]
            try:
                a, b = (
                    Bench(context_pb2_grpc.ContextServiceStub(ch), label)
                    for ch, label in zip(channels, "ab", strict=True)
                )
                for cid in ("read", "alternating", "one"):
                    a.build(cid, history)
                    b.info(cid)  # both replicas hold a copy
                retried = [0]
                clock = time.perf_counter_ns
                latest_ns: list[int] = []
                cached_ns: list[int] = []
                stale = 0
                for i in range(n + ctx.pick(full=10, quick=2)):
                    version = _turn(a, "read", f"r{i}", retried)
                    t0 = clock()
                    seen_cached = _info(b, "read", cached=True).version
                    t1 = clock()
                    seen = _info(b, "read", cached=False).version
                    t2 = clock()
                    if seen != version:
                        raise RuntimeError(f"B read version {seen} after A wrote {version}")
                    stale += seen_cached != version
                    cached_ns.append(t1 - t0)
                    latest_ns.append(t2 - t1)
                alternating_ns: list[int] = []
                one_ns: list[int] = []
                for i in range(n + ctx.pick(full=10, quick=2)):
                    t0 = clock()
                    _turn((a, b)[i % 2], "alternating", f"alt{i}", retried)
                    t1 = clock()
                    _turn(a, "one", f"one{i}", retried)
                    t2 = clock()
                    alternating_ns.append(t1 - t0)
                    one_ns.append(t2 - t1)
                if a.info("alternating").message_count != history + 2 * len(alternating_ns):
                    raise RuntimeError("alternating turns lost a message")
            finally:
                for ch in channels:
                    ch.close()
    warm = ctx.pick(full=10, quick=2)
    common = {
        "store": "s3 (moto ThreadedMotoServer in the bench process, real HTTP)",
        "replicas": 2,
        "history_messages": history,
        "turn": "1 user + 1 assistant message, 1 KB each",
        "unavailable_retries": retried[0],
    }
    yield result_from_samples(
        cached_ns[warm:],
        name="ctxd.replicas.get_info.cached",
        group=GROUP,
        extra={**common, "what": "B: GetContext(INFO, CACHED) after A's AppendTurn",
               "stale_reads": stale},
    )  # fmt: skip
    yield result_from_samples(
        latest_ns[warm:],
        name="ctxd.replicas.get_info.latest_after_write",
        group=GROUP,
        ratio_to="ctxd.replicas.get_info.cached",
        extra={**common, "what": "B: GetContext(INFO, LATEST) right after A's AppendTurn"},
    )
    yield result_from_samples(
        one_ns[warm:],
        name="ctxd.replicas.append_turn.one_replica",
        group=GROUP,
        extra={**common, "what": "AppendTurn, always on A"},
    )
    yield result_from_samples(
        alternating_ns[warm:],
        name="ctxd.replicas.append_turn.alternating",
        group=GROUP,
        ratio_to="ctxd.replicas.append_turn.one_replica",
        extra={**common, "what": "AppendTurn on one context, alternately on A and B"},
    )
