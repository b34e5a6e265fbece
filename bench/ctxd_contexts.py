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
* ``floor.echo_put.turn.lmdb``: the write floor AppendTurn is compared with
  (``bench.compare``): ``bench.echo_server``'s ``Put`` of the same
  AppendTurnRequest bytes (one fsync'd LMDB put inline, then echo), timed
  once per round right before the turn at the first mark, so load that
  drifts during the run hits both sides of the ratio alike (LMDB only);
* ``ctxd.get_context.incremental.<store>.h<mark>``: right after each of those
  turns, GetContext(SLICE) with ``since_version`` = the version held before
  the turn (what a runtime reads to build its next prompt: just the turn);
* ``ctxd.turn.<store>.h<mark>``: a runtime's whole turn, the AppendTurn plus
  that incremental read (``bench.compare`` puts it next to the Agents SDK's
  ``add_items`` + ``get_items``);
* ``ctxd.turn_one_call.<store>.h<mark>``: the same turn as one call, the
  AppendTurn carrying that read (``AppendTurnRequest.read``), measured on
  the same conversations right after each two-call turn;
* ``ctxd.get_context.default_client.<store>.mib<N>`` (ms): every page of the
  slice of a context of N tool results of 1 MiB each, read by a client with
  default channel options (4 MiB receive limit);
* ``ctxd.get_context.slice.<store>.h10000``: GetContext(SLICE) of the 10,000-
  message conversation, every page (default page size; 10 MB of text), and
  ``ctxd.get_context.slice_max_page.<store>.h10000`` the same with the
  largest page size (fewer, ~3 MiB pages: what per-page costs add); on S3
  also ``ctxd.get_context.slice_cached.s3.h10000``, read CACHED (this
  replica's copy: the one GET a read at the default consistency makes
  first, to see what other replicas committed, left out);
* ``floor.grpc.pages.<store>.h10000``: the floor of that read: the same
  replies, byte for byte, from ``bench.echo_server`` (a server that does no
  work), each parsed as the client parses ctxd's, timed interleaved with
  it; the slice row's ratio is to this one (on LMDB; the CACHED row's on S3);
* ``floor.grpc.pages_and_get.s3.h10000``: one GET of an absent key from the
  same S3 server (boto3, as ctxd's store), then that floor: on a shared
  store a read at the default consistency first asks for the log record
  after its copy's version, so no such read goes under this; the S3 slice
  row's ratio is to this one;
* ``ctxd.restore.<store>.h10000``: a fresh sidecar's first GetContext(INFO) of
  that conversation, i.e. the restore from the store (head + sealed
  segments + log tail), one fresh process per sample;
  ``ctxd.get_context.first_slice.<store>.h10000`` the slice read right
  after it, which also builds the message objects the restore left unbuilt
  (ratio to the slice row: what the first read after a restore adds).

Checkpoints run in the background as configured by default
(``contexts.checkpoint_every = 64`` versions or 1 MiB of new messages), so
some measured turns share the process with one; the clean-up after a
checkpoint (sealing log records) yields to turns (see
``ctxd_sidecar.core.contexts.janitor``), which a back-to-back benchmark like this
one keeps busy, so most of it happens after the measurement.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator

from bench.ctxd_reads import absent_get, read_rows
from bench.ctxd_rpc import CALL_TIMEOUT_S, open_channel, read_all, sidecar_cmd
from bench.harness import Context, Result, filesystem_of, register, result_from_samples
from bench.moto_s3 import create_bucket, moto_server, store_uri
from bench.procs import python_module_cmd, spawn

GROUP = "contexts"
MARKS_FULL: tuple[int, ...] = (10, 1_000, 4_000, 10_000)
MARKS_QUICK: tuple[int, ...] = (10, 1_000)
MESSAGE_BYTES = 1024
#: Messages per AppendTurn while building history (under max_turn_messages).
BUILD_TURN = 250
GROWTH_BUDGET = 0.05
#: Tool results of the big context, and the text of each (at max_message_bytes).
BIG_RESULTS_FULL, BIG_RESULTS_QUICK = 20, 4
BIG_RESULT = "x" * (1024 * 1024 - 64)
DEFAULT_CLIENT_LIMIT = 4 * 1024 * 1024
#: Seconds for the background checkpoint of the big context to finish before it is read.
SETTLE_S_FULL, SETTLE_S_QUICK = 3.0, 0.5
#: Row kinds measured per turn: what each times.
KINDS: dict[str, str] = {
    "append": "AppendTurn",
    "incremental": "GetContext(SLICE, since_version=version before the turn)",
    "turn": "AppendTurn + GetContext(SLICE, since_version=version before the turn)",
    "turn_one_call": "AppendTurn with read = GetContext(SLICE, since_version=version before)",
}
ROW_NAMES: dict[str, str] = {
    "append": "ctxd.append_turn.{store}.h{mark}",
    "incremental": "ctxd.get_context.incremental.{store}.h{mark}",
    "turn": "ctxd.turn.{store}.h{mark}",
    "turn_one_call": "ctxd.turn_one_call.{store}.h{mark}",
}
#: The write floor's row (``bench.compare`` divides AppendTurn's p50 by it).
WRITE_FLOOR = "floor.echo_put.turn.{store}"
BUCKET = "bench-contexts"


def _text(tag: str) -> str:
    return (tag + " " + "lorem ipsum dolor sit amet " * 40)[:MESSAGE_BYTES]


class Bench:
    """One sidecar on one store: build conversations, time turns."""

    def __init__(self, stub, label: str) -> None:
        from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb

        self.pb = pb
        self.stub = stub
        self.label = label
        self.user = pb.Message(user=pb.UserMessage(text=_text("user")))
        self.assistant = pb.Message(assistant=pb.AssistantMessage(text=_text("assistant")))

    def turn(self, cid: str, messages) -> object:
        req = self.pb.AppendTurnRequest(context_id=cid, messages=messages)
        return self.stub.AppendTurn(req, timeout=CALL_TIMEOUT_S)

    def build(self, cid: str, messages: int) -> int:
        """Grow ``cid`` to ``messages`` messages; returns its version."""
        pair = [self.user, self.assistant]
        left = messages
        while left > 0:
            n = min(BUILD_TURN, left)
            self.turn(cid, (pair * ((n + 1) // 2))[:n])
            left -= n
        info = self.info(cid)
        if info.message_count != messages:
            raise RuntimeError(f"{cid} has {info.message_count} messages, expected {messages}")
        return info.version

    def info(self, cid: str):
        req = self.pb.GetContextRequest(context_id=cid, view=self.pb.CONTEXT_VIEW_INFO)
        return self.stub.GetContext(req, timeout=CALL_TIMEOUT_S).info

    def read_since(self, cid: str, version: int):
        req = self.pb.GetContextRequest(
            context_id=cid, view=self.pb.CONTEXT_VIEW_SLICE, since_version=version
        )
        return self.stub.GetContext(req, timeout=CALL_TIMEOUT_S)

    def turn_reading(self, cid: str, messages, version: int):
        """AppendTurn with the incremental read in the same call."""
        read = self.pb.GetContextRequest(view=self.pb.CONTEXT_VIEW_SLICE, since_version=version)
        req = self.pb.AppendTurnRequest(context_id=cid, messages=messages, read=read)
        return self.stub.AppendTurn(req, timeout=CALL_TIMEOUT_S)

    def build_tool_results(self, cid: str, results: int) -> None:
        """A user message, then ``results`` rounds of a tool call and its 1 MiB result."""
        pb = self.pb
        self.turn(cid, [self.user])
        for i in range(results):
            call = pb.ToolCall(id=f"c{i}", name="logs", arguments_json="{}")
            result = pb.ToolResult(call_id=f"c{i}", name="logs", text=BIG_RESULT)
            self.turn(
                cid,
                [
                    pb.Message(assistant=pb.AssistantMessage(tool_calls=[call])),
                    pb.Message(tool=result),
                ],
            )

    def measure_marks(
        self, marks: tuple[int, ...], n: int, floor: Callable[[bytes], object] | None = None
    ) -> tuple[dict[int, dict[str, Result]], list[int]]:
        """``n`` turns at each mark, the marks interleaved (one turn each in
        rotation) so that drift in the machine's load hits all alike; each
        turn is followed by the incremental read a runtime makes next, then
        by the same turn as one call (AppendTurn carrying that read).

        With ``floor`` (the echo server's fsync'd ``Put``), each round also
        times it on the bytes of the first mark's AppendTurn request, right
        before that turn; those samples are returned with the rows."""
        plan: dict[int, tuple[list[str], int]] = {}
        held: dict[str, int] = {}
        for mark in marks:
            # Each round appends two turns (two-call, then one-call) of two messages.
            per_conv = max(1, math.floor(GROWTH_BUDGET * mark / 4))
            convs = [f"{self.label}-h{mark}-{i}" for i in range(math.ceil(n / per_conv))]
            for cid in convs:
                held[cid] = self.build(cid, mark)
            plan[mark] = (convs, per_conv)
        pair = [self.user, self.assistant]
        append = self.pb.SLICE_CHANGE_APPEND
        samples = {kind: {mark: [] for mark in marks} for kind in KINDS}
        floor_ns: list[int] = []
        clock = time.perf_counter_ns
        for i in range(n):
            for mark in marks:
                convs, _ = plan[mark]
                cid = convs[i % len(convs)]
                if floor is not None and mark == marks[0]:
                    request = self.pb.AppendTurnRequest(context_id=cid, messages=pair)
                    t0 = clock()
                    floor(request.SerializeToString())
                    floor_ns.append(clock() - t0)
                t0 = clock()
                self.turn(cid, pair)
                t1 = clock()
                delta = self.read_since(cid, held[cid])
                t2 = clock()
                if delta.change != append or len(delta.slice) != len(pair):
                    raise RuntimeError(f"{cid}: incremental read gave {delta.change}")
                t3 = clock()
                one = self.turn_reading(cid, pair, delta.info.version)
                t4 = clock()
                if one.read.change != append or len(one.read.slice) != len(pair):
                    raise RuntimeError(f"{cid}: a turn's read gave {one.read.change}")
                held[cid] = one.read.info.version
                samples["append"][mark].append(t1 - t0)
                samples["incremental"][mark].append(t2 - t1)
                samples["turn"][mark].append(t2 - t0)
                samples["turn_one_call"][mark].append(t4 - t3)
        out: dict[int, dict[str, Result]] = {}
        for mark in marks:
            extra = {
                "history_messages": mark,
                "conversations": len(plan[mark][0]),
                "turns_per_conversation": plan[mark][1],
                "turn": "1 user + 1 assistant message, 1 KB each",
            }
            out[mark] = {
                kind: result_from_samples(
                    samples[kind][mark],
                    name=ROW_NAMES[kind].format(store=self.label, mark=mark),
                    group=GROUP,
                    extra={**extra, "what": KINDS[kind]},
                )
                for kind in KINDS
            }
        return out, floor_ns


@contextlib.contextmanager
def _write_floor(ctx: Context) -> Iterator[Callable[[bytes], object]]:
    """``bench.echo_server``'s ``Put`` (an fsync'd LMDB put of the request,
    then echo) on this run's scratch filesystem, as a call taking bytes."""
    import grpc

    from bench.echo_server import PUT_METHOD

    cmd = python_module_cmd(
        "bench.echo_server", "--watch-stdin", "--lmdb", ctx.tmpdir(prefix="bench-ctx-echo-put-")
    )
    with spawn(cmd) as (_, port):
        channel = grpc.insecure_channel(f"127.0.0.1:{int(port)}")
        try:
            grpc.channel_ready_future(channel).result(timeout=20)
            put = channel.unary_unary(PUT_METHOD, _registered_method=True)
            yield lambda request: put(request, timeout=CALL_TIMEOUT_S)
        finally:
            channel.close()


def in_ms(result: Result) -> Result:
    """``result`` (µs) restated in ms: the unit a read of megabytes is read in."""
    result.unit = "ms"
    result.p50 /= 1e3
    result.p99 = None if result.p99 is None else result.p99 / 1e3
    for key in [k for k in result.extra if k.endswith("_us")]:
        result.extra[key[:-3] + "_ms"] = round(result.extra.pop(key) / 1e3, 3)
    return result


def _suite(
    ctx: Context,
    label: str,
    store: str,
    common: dict,
    ask_store: Callable[[], None] | None = None,
) -> Iterator[Result]:
    """Every row of one store; ``ask_store``: see :func:`bench.ctxd_reads.read_rows`."""
    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc

    marks = ctx.pick(full=MARKS_FULL, quick=MARKS_QUICK)
    n = ctx.pick(full=200, quick=20)
    biggest = max(marks)
    big_conv = f"{label}-h{biggest}-0"

    with contextlib.ExitStack() as stack:
        _, port = stack.enter_context(spawn(sidecar_cmd(store)))
        channel = open_channel(port)
        stack.callback(channel.close)
        floor = None
        if label == "lmdb":
            floor = stack.enter_context(_write_floor(ctx))
        b = Bench(context_pb2_grpc.ContextServiceStub(channel), label)
        for _ in range(20):  # warm the channel and the code paths
            b.turn(f"{label}-warmup", [b.user, b.assistant])
            if floor is not None:
                floor(b"warm-up")
        results, floor_ns = b.measure_marks(marks, n, floor)
        if floor is not None:
            yield result_from_samples(
                floor_ns,
                name=WRITE_FLOOR.format(store=label),
                group=GROUP,
                extra={
                    **common,
                    "what": "bench.echo_server Put of the first mark's AppendTurnRequest bytes: "
                    "one fsync'd LMDB put inline, then echo; timed right before that turn",
                },
            )
        for kind in KINDS:
            for mark in marks:
                res = results[mark][kind]
                res.extra.update(common)
                if mark == biggest:
                    growth = res.p50 / results[marks[0]][kind].p50
                    res.extra[f"growth_vs_h{marks[0]}"] = round(growth, 3)
                yield res
        yield _default_client_read(ctx, b, port, label, common)
    # Restore: a fresh process per sample; the first GetContext restores.
    yield from read_rows(ctx, label, store, common, big_conv, biggest, ask_store)


def _default_client_read(ctx: Context, b: Bench, port: str, label: str, common: dict) -> Result:
    """Every page of a context of 1 MiB tool results, by a client with default options."""
    import grpc

    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc

    results = ctx.pick(full=BIG_RESULTS_FULL, quick=BIG_RESULTS_QUICK)
    cid = f"{label}-tool-results"
    b.build_tool_results(cid, results)
    time.sleep(ctx.pick(full=SETTLE_S_FULL, quick=SETTLE_S_QUICK))  # not racing its checkpoint
    reads = ctx.pick(full=10, quick=1)
    channel = grpc.insecure_channel(f"127.0.0.1:{int(port)}")  # default options: 4 MiB
    try:
        grpc.channel_ready_future(channel).result(timeout=20)
        stub = context_pb2_grpc.ContextServiceStub(channel)
        samples: list[int] = []
        for _ in range(reads + 1):
            t0 = time.perf_counter_ns()
            pages = read_all(stub, cid, b.pb.CONTEXT_VIEW_SLICE)
            samples.append(time.perf_counter_ns() - t0)
        samples.pop(0)  # the first one warms up
    finally:
        channel.close()
    sizes = [p.ByteSize() for p in pages]
    if sum(len(p.slice) for p in pages) != 1 + 2 * results or max(sizes) >= DEFAULT_CLIENT_LIMIT:
        raise RuntimeError(f"paged read of {cid}: {len(pages)} pages of {sizes} bytes")
    return in_ms(
        result_from_samples(
            samples,
            name=f"ctxd.get_context.default_client.{label}.mib{results}",
            group=GROUP,
            extra={
                **common,
                "context": f"1 user message + {results} tool calls with 1 MiB results",
                "client": "grpc.insecure_channel with default options (4 MiB receive)",
                "pages": len(pages),
                "bytes": sum(sizes),
                "largest_page_bytes": max(sizes),
            },
        )
    )


@register(GROUP)
def contexts_lmdb(ctx: Context) -> Iterator[Result]:
    data = ctx.tmpdir(prefix="bench-ctx-lmdb-")
    common = {"store": "lmdb (sync=True, metasync=True)", "fs": filesystem_of(data)}
    yield from _suite(ctx, "lmdb", f"lmdb://{data}?map_size=4GiB", common)


@register(GROUP)
def contexts_s3(ctx: Context) -> Iterator[Result]:
    with moto_server() as endpoint:
        create_bucket(endpoint, BUCKET)
        common = {"store": "s3 (moto ThreadedMotoServer in the bench process, real HTTP)"}
        yield from _suite(
            ctx, "s3", store_uri(endpoint, BUCKET), common, absent_get(endpoint, BUCKET)
        )
