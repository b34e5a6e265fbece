"""Whole-process figures for ctxd: cold start, resident memory, AppendTurn throughput.

* ``ctxd.cold_start``: ``ctxd serve`` from exec to health SERVING on a fresh
  LMDB directory, ratio to ``floor.python_grpc_import`` (an interpreter that
  only imports grpc: what any Python gRPC sidecar pays before its own code).
  ctxd's bytecode is compiled first, as ``pip install`` compiles it: run from
  this tree with ``PYTHONDONTWRITEBYTECODE`` set (as in CI and containers),
  every start would otherwise compile ctxd's ~100 modules again (about
  0.2 s on the 2-core VM), which no installed sidecar does.
* ``ctxd.rss.contexts.c<N>``: resident set size (MB) after one turn
  (1 KB user + 1 KB assistant) was appended to each of N contexts, all still
  in the registry, ratio to ``ctxd.rss.idle`` (the same process before).
* ``ctxd.append_turn.tput.c<N>``: AppendTurn calls/s with N concurrent callers,
  each on its own conversation, ratio to ``process.floor.echo.tput.c<N>``: the
  bare echo server answering a request of the same size, measured in windows
  alternating with ctxd's so drifting load falls on both.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from bench.echo_server import METHOD as ECHO_METHOD
from bench.harness import (
    Context,
    Result,
    interleaved_throughput,
    register,
    result_from_samples,
)
from bench.procs import REPO_ROOT, python_module_cmd, spawn

CALL_TIMEOUT_S = 10.0
TEXT_1K = ("The quick brown fox jumps over the lazy dog. " * 23)[:1024]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The readiness probe retries a refused connect every 10 ms. With gRPC's
#: default reconnect backoff (1 s, then 1.6x longer, each +-20%) a probe that
#: connects before the sidecar listens measures the backoff, not the sidecar:
#: cold start then read 0.8-1.2 s (2.5 s after a second refusal) for a sidecar
#: that was SERVING in about half a second.
PROBE_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 10),
    ("grpc.min_reconnect_backoff_ms", 10),
    ("grpc.max_reconnect_backoff_ms", 10),
)


def _wait_serving(address: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address, options=PROBE_OPTIONS) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"ctxd exited with {proc.returncode}")
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(), timeout=0.5).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.005)
    raise TimeoutError("ctxd did not become SERVING")


class _Sidecar:
    """``python -m sidecar serve`` on LMDB in a scratch directory."""

    def __init__(self, ctx: Context, *settings: str) -> None:
        self.address = f"127.0.0.1:{_free_port()}"
        store = f"lmdb://{ctx.tmpdir('bench-ctxd-')}/data"
        sets = [a for s in settings for a in ("--set", s)]
        self.cmd = [
            sys.executable,
            "-m",
            "ctxd_sidecar",
            "serve",
            "--listen",
            self.address,
            "--store",
            store,
            "--log-level",
            "WARNING",
            *sets,
        ]

    def __enter__(self) -> _Sidecar:
        self.started = time.perf_counter_ns()
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_serving(self.address, self.proc)
        self.ready_ns = time.perf_counter_ns() - self.started
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")


def _compile_bytecode() -> None:
    """Write ctxd's bytecode next to its sources, as an install does."""
    import compileall

    for package in ("sidecar", "plugins"):
        if not compileall.compile_dir(str(REPO_ROOT / package), quiet=1):
            raise RuntimeError(f"could not compile {package}")


def _turn(pb, context_id: str, i: int):
    return pb.AppendTurnRequest(
        context_id=context_id,
        messages=[
            pb.Message(user=pb.UserMessage(text=TEXT_1K)),
            pb.Message(assistant=pb.AssistantMessage(text=TEXT_1K)),
        ],
        idempotency_key=f"{context_id}-{i}",
    )


@register("process")
def ctxd_process(ctx: Context) -> Iterator[Result]:
    import grpc

    from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc

    # -- cold start ------------------------------------------------------------------
    runs = ctx.pick(full=7, quick=2)
    floor = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        subprocess.run([sys.executable, "-c", "import grpc"], check=True)
        floor.append(time.perf_counter_ns() - t0)
    yield result_from_samples(floor, name="floor.python_grpc_import", group="process")
    _compile_bytecode()
    starts = []
    for _ in range(runs):
        with _Sidecar(ctx) as sc:
            starts.append(sc.ready_ns)
    yield result_from_samples(
        starts,
        name="ctxd.cold_start",
        group="process",
        ratio_to="floor.python_grpc_import",
        extra={"bytecode": "compiled before the starts, as pip install does"},
    )

    # -- resident memory with many contexts open ---------------------------------------
    marks = ctx.pick(full=(1_000, 10_000), quick=(200,))
    with _Sidecar(
        ctx, "contexts.cache_max_contexts=20000", "contexts.cache_max_bytes=4294967296"
    ) as sc:
        channel = grpc.insecure_channel(sc.address)
        stub = context_pb2_grpc.ContextServiceStub(channel)
        idle = sc.rss_mb()
        yield Result("ctxd.rss.idle", "process", "MB", idle, None, 1)
        opened = 0
        with ThreadPoolExecutor(16) as pool:
            for mark in marks:
                ids = [f"conv-{i}" for i in range(opened, mark)]
                list(
                    pool.map(
                        lambda cid: stub.AppendTurn(_turn(pb, cid, 0), timeout=CALL_TIMEOUT_S), ids
                    )
                )
                opened = mark
                time.sleep(0.5)
                yield Result(
                    f"ctxd.rss.contexts.c{mark}",
                    "process",
                    "MB",
                    sc.rss_mb(),
                    None,
                    mark,
                    extra={"messages_per_context": 2},
                    ratio_to="ctxd.rss.idle",
                )

        # -- AppendTurn throughput, alternating with an echo floor -----------------------
        seconds = ctx.pick(full=4.0, quick=0.5)
        rounds = ctx.pick(full=4, quick=1)
        with (
            spawn(python_module_cmd("bench.echo_server", "--watch-stdin")) as (_, echo_port),
            grpc.insecure_channel(f"127.0.0.1:{int(echo_port)}") as echo_channel,
        ):
            echo_call = echo_channel.unary_unary(ECHO_METHOD, _registered_method=True)
            # An AppendTurn request's size, so both sides move the same bytes.
            payload = _turn(pb, "tput-size", 0).SerializeToString()
            for callers in (1, 4, 16):
                local = threading.local()
                counter = itertools.count()

                def append(callers=callers, local=local, counter=counter) -> None:
                    if not hasattr(local, "cid"):
                        local.cid = f"tput-{callers}-{next(counter)}"
                        local.i = itertools.count()
                    stub.AppendTurn(_turn(pb, local.cid, next(local.i)), timeout=CALL_TIMEOUT_S)

                def echo() -> None:
                    echo_call(payload, timeout=CALL_TIMEOUT_S)

                floor = f"process.floor.echo.tput.c{callers}"
                yield from interleaved_throughput(
                    [
                        (floor, echo, None, {"payload_bytes": len(payload)}),
                        (f"ctxd.append_turn.tput.c{callers}", append, floor, {}),
                    ],
                    callers,
                    seconds,
                    rounds,
                    group="process",
                    warmup_seconds=ctx.pick(full=0.25, quick=0.05),
                )
        channel.close()


if __name__ == "__main__":  # pragma: no cover - manual runs
    os.execvp(sys.executable, [sys.executable, "-m", "bench", "--only", "process"])
