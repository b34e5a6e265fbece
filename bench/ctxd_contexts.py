"""ctxd AppendTurn against history length, the slice, and restore, on LMDB and S3.

Workload (the same as ``bench.peers``): every turn is one user message and one
assistant message of 1 KB of text each. A real ctxd runs in a child process
(``python -m bench.ctxd_server``) on

* LMDB (fsync on every commit), and
* S3 served by moto (``ThreadedMotoServer`` in this process, real HTTP).

Rows (p50/p99 in µs):

* ``ctxd.append_turn.<store>.h<mark>``: one AppendTurn with ``mark`` messages
  already in the conversation (10, 1,000, 4,000, 10,000). History is built
  quickly with big multi-message turns; measured turns are spread over
  several conversations built to the same mark so that they add at most
  ``GROWTH_BUDGET`` of the mark to any one of them (and at least one turn),
  and the marks are measured interleaved (one turn at each in rotation).
  The growth ratio h10 -> h10000 (target <= 1.15) is derived by
  ``bench.compare`` and is also in the h10000 row's ``extra``;
* ``ctxd.get_context.slice.<store>.h10000``: GetContext(SLICE) of the 10,000-
  message conversation (10 MB of text over gRPC);
* ``ctxd.restore.<store>.h10000``: a fresh sidecar's first GetContext(INFO) of
  that conversation, i.e. the restore from the store (head + sealed
  segments + log tail), one fresh process per sample.

Checkpoints run in the background as configured by default
(``contexts.checkpoint_every = 64`` versions or 1 MiB of new messages), so
some measured turns share the process with one; the clean-up after a
checkpoint (sealing log records) yields to turns (see
``sidecar.core.contexts.janitor``), which a back-to-back benchmark like this
one keeps busy, so most of it happens after the measurement.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator

from bench.harness import Context, Result, filesystem_of, register, result_from_samples
from bench.procs import python_module_cmd, spawn

GROUP = "contexts"
MARKS_FULL: tuple[int, ...] = (10, 1_000, 4_000, 10_000)
MARKS_QUICK: tuple[int, ...] = (10, 1_000)
MESSAGE_BYTES = 1024
#: Messages per AppendTurn while building history (under max_turn_messages).
BUILD_TURN = 250
GROWTH_BUDGET = 0.05
CALL_TIMEOUT_S = 30.0
BUCKET = "bench-contexts"


def append_name(store: str, mark: int) -> str:
    return f"ctxd.append_turn.{store}.h{mark}"


def _text(tag: str) -> str:
    return (tag + " " + "lorem ipsum dolor sit amet " * 40)[:MESSAGE_BYTES]


class Bench:
    """One sidecar on one store: build conversations, time turns."""

    def __init__(self, stub, label: str) -> None:
        from sidecar.api.ctxd.v1 import context_pb2 as pb

        self.pb = pb
        self.stub = stub
        self.label = label
        self.user = pb.Message(user=pb.UserMessage(text=_text("user")))
        self.assistant = pb.Message(assistant=pb.AssistantMessage(text=_text("assistant")))

    def turn(self, cid: str, messages) -> object:
        req = self.pb.AppendTurnRequest(context_id=cid, messages=messages)
        return self.stub.AppendTurn(req, timeout=CALL_TIMEOUT_S)

    def build(self, cid: str, messages: int) -> None:
        pair = [self.user, self.assistant]
        left = messages
        while left > 0:
            n = min(BUILD_TURN, left)
            self.turn(cid, (pair * ((n + 1) // 2))[:n])
            left -= n
        info = self.info(cid)
        if info.message_count != messages:
            raise RuntimeError(f"{cid} has {info.message_count} messages, expected {messages}")

    def info(self, cid: str):
        req = self.pb.GetContextRequest(context_id=cid, view=self.pb.CONTEXT_VIEW_INFO)
        return self.stub.GetContext(req, timeout=CALL_TIMEOUT_S).info

    def measure_marks(self, marks: tuple[int, ...], n: int) -> dict[int, Result]:
        """``n`` turns at each mark, the marks interleaved (one turn each in
        rotation) so that drift in the machine's load hits all alike."""
        plan: dict[int, tuple[list[str], int]] = {}
        for mark in marks:
            per_conv = max(1, math.floor(GROWTH_BUDGET * mark / 2))
            convs = [f"{self.label}-h{mark}-{i}" for i in range(math.ceil(n / per_conv))]
            for cid in convs:
                self.build(cid, mark)
            plan[mark] = (convs, per_conv)
        pair = [self.user, self.assistant]
        samples: dict[int, list[int]] = {mark: [] for mark in marks}
        clock = time.perf_counter_ns
        for i in range(n):
            for mark in marks:
                convs, _ = plan[mark]
                cid = convs[i % len(convs)]
                t0 = clock()
                self.turn(cid, pair)
                samples[mark].append(clock() - t0)
        return {
            mark: result_from_samples(
                samples[mark],
                name=append_name(self.label, mark),
                group=GROUP,
                extra={
                    "history_messages": mark,
                    "conversations": len(plan[mark][0]),
                    "turns_per_conversation": plan[mark][1],
                    "turn": "1 user + 1 assistant message, 1 KB each",
                },
            )
            for mark in marks
        }


def _sidecar_cmd(store: str, *settings: str) -> list[str]:
    args = ["--store", store]
    # The workload measures appends to long histories: no automatic compaction.
    for s in ("contexts.auto_compact=false", *settings):
        args += ["--set", s]
    return python_module_cmd("bench.ctxd_server", *args)


def _channel(port: str):
    import grpc

    channel = grpc.insecure_channel(
        f"127.0.0.1:{int(port)}",
        options=[
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.max_send_message_length", 64 << 20),
        ],
    )
    grpc.channel_ready_future(channel).result(timeout=20)
    return channel


def _suite(ctx: Context, label: str, store: str, common: dict) -> Iterator[Result]:
    from sidecar.api.ctxd.v1 import context_pb2 as pb
    from sidecar.api.ctxd.v1 import context_pb2_grpc

    marks = ctx.pick(full=MARKS_FULL, quick=MARKS_QUICK)
    n = ctx.pick(full=200, quick=20)
    restores = ctx.pick(full=3, quick=1)
    slices = ctx.pick(full=10, quick=2)
    biggest = max(marks)
    big_conv = f"{label}-h{biggest}-0"

    with spawn(_sidecar_cmd(store)) as (_, port):
        channel = _channel(port)
        try:
            b = Bench(context_pb2_grpc.ContextServiceStub(channel), label)
            for _ in range(20):  # warm the channel and the code paths
                b.turn(f"{label}-warmup", [b.user, b.assistant])
            results = b.measure_marks(marks, n)
            for mark in marks:
                res = results[mark]
                res.extra.update(common)
                if mark == biggest:
                    res.extra[f"growth_vs_h{marks[0]}"] = round(res.p50 / results[marks[0]].p50, 3)
                yield res
        finally:
            channel.close()

    # Restore: a fresh process per sample; the first GetContext restores.
    restore_ns: list[int] = []
    slice_ns: list[int] = []
    for i in range(restores):
        with spawn(_sidecar_cmd(store)) as (_, port):
            channel = _channel(port)
            try:
                stub = context_pb2_grpc.ContextServiceStub(channel)
                req = pb.GetContextRequest(context_id=big_conv, view=pb.CONTEXT_VIEW_INFO)
                t0 = time.perf_counter_ns()
                info = stub.GetContext(req, timeout=CALL_TIMEOUT_S).info
                restore_ns.append(time.perf_counter_ns() - t0)
                if info.message_count < biggest:
                    raise RuntimeError(f"restored {info.message_count} messages")
                if i == restores - 1:
                    sreq = pb.GetContextRequest(context_id=big_conv, view=pb.CONTEXT_VIEW_SLICE)
                    for _ in range(slices + 1):
                        t0 = time.perf_counter_ns()
                        resp = stub.GetContext(sreq, timeout=CALL_TIMEOUT_S)
                        slice_ns.append(time.perf_counter_ns() - t0)
                    slice_ns.pop(0)  # the first one warms up
                    if len(resp.slice) < biggest:
                        raise RuntimeError("slice is short")
            finally:
                channel.close()
    yield result_from_samples(
        slice_ns,
        name=f"ctxd.get_context.slice.{label}.h{biggest}",
        group=GROUP,
        extra={**common, "messages": info.message_count, "view": "CONTEXT_VIEW_SLICE"},
    )
    yield result_from_samples(
        restore_ns,
        name=f"ctxd.restore.{label}.h{biggest}",
        group=GROUP,
        extra={
            **common,
            "messages": info.message_count,
            "what": "fresh sidecar process, first GetContext(INFO)",
        },
    )


@register(GROUP)
def contexts_lmdb(ctx: Context) -> Iterator[Result]:
    data = ctx.tmpdir(prefix="bench-ctx-lmdb-")
    common = {"store": "lmdb (sync=True, metasync=True)", "fs": filesystem_of(data)}
    yield from _suite(ctx, "lmdb", f"lmdb://{data}?map_size=4GiB", common)


@register(GROUP)
def contexts_s3(ctx: Context) -> Iterator[Result]:
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        ).create_bucket(Bucket=BUCKET)
        store = f"s3://{BUCKET}/ctxd?endpoint_url={endpoint}&region=us-east-1"
        common = {"store": "s3 (moto ThreadedMotoServer in the bench process, real HTTP)"}
        yield from _suite(ctx, "s3", store, common)
    finally:
        server.stop()


# -- server mode ---------------------------------------------------------------------
