"""ctxd Memory.Get / Memory.Set on durable LMDB, as ratios to the floors.

A real ctxd (the same ``Sidecar`` that ``ctxd serve`` runs) is started in a
child process on an LMDB store (fsync on every commit) and called with the
same synchronous client style and deadline as ``bench.floor_grpc``:

* ``ctxd.memory.get``: p50/p99 of Get on a ~100-byte value, ratio to
  ``memory.floor.echo.unary`` (target <= 1.25x);
* ``ctxd.memory.set``: p50/p99 of Set of a new key, ratio to
  ``memory.floor.echo_put.unary`` (target <= 1.25x): the echo server's
  ``Put``, one fsync'd LMDB put of a 200-byte request inline in the
  handler, i.e. echo + put measured whole. ``floor.echo+lmdb.put`` is the
  sum of the echo row and a put timed on its own in this process; a put
  inside a serving gRPC process costs more than that (on the 2-core VM
  about twice as much), so the sum understates what any gRPC server pays
  for a write;
* ``ctxd.memory.{get,set}.tput.c16``: throughput with 16 concurrent callers
  on one channel, ratio to ``memory.floor.echo.tput.c16`` (target >= 0.8x),
  the three measured in alternating windows.

The ``memory.floor.*`` rows repeat the ``grpc``/``lmdb`` floors right before
the ctxd rows (same machine state, same scratch filesystem), so the ratios
hold even when this group runs alone and on a machine whose load drifts.
The server is ``python -m bench.ctxd_server`` (prints its port, serves until
stdin closes).
"""

from __future__ import annotations

import gc
import itertools
import os
import threading
import time
from collections.abc import Iterator

from bench.harness import (
    Context,
    Result,
    filesystem_of,
    interleaved_throughput,
    register,
    result_from_samples,
)
from bench.procs import python_module_cmd, spawn

CALL_TIMEOUT_S = 10.0  # as bench.floor_grpc
CALLERS = 16
#: ~100 bytes of JSON, like the echo payload.
VALUE = '{"user":"ada","lang":"en","tz":"Europe/London","n":12345678901234567890,"tags":["a","b"]}'

GET = "ctxd.memory.get"
SET = "ctxd.memory.set"
GET_TPUT = f"ctxd.memory.get.tput.c{CALLERS}"
SET_TPUT = f"ctxd.memory.set.tput.c{CALLERS}"
FLOOR_ECHO = "memory.floor.echo.unary"
FLOOR_ECHO_TPUT = f"memory.floor.echo.tput.c{CALLERS}"
FLOOR_PUT = "memory.floor.lmdb.put"
FLOOR_SET = "floor.echo+lmdb.put"
FLOOR_WRITE = "memory.floor.echo_put.unary"


def _timed_block(fn, n: int, out: list[int]) -> None:
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fn()
        out.append(clock() - t0)


@register("memory")
def ctxd_memory(ctx: Context) -> Iterator[Result]:
    import grpc
    import lmdb

    from bench.echo_server import METHOD, PUT_METHOD
    from ctxd_sidecar.api.ctxd.v1 import memory_pb2, memory_pb2_grpc

    n = ctx.pick(full=5000, quick=200)
    n_set = ctx.pick(full=2000, quick=100)
    warmup = ctx.pick(full=300, quick=20)
    rounds = ctx.pick(full=10, quick=2)
    seconds = ctx.pick(full=5.0, quick=0.5)
    warm_s = ctx.pick(full=0.25, quick=0.05)
    tput_rounds = ctx.pick(full=5, quick=1)

    floor_dir = ctx.tmpdir(prefix="bench-mem-floor-")
    data = ctx.tmpdir(prefix="bench-mem-ctxd-")
    serve_cmd = python_module_cmd(
        "bench.ctxd_server",
        "--store",
        f"lmdb://{data}?map_size=1GiB",
        "--set",
        "memory.max_keys=100000000",
        "--set",
        "memory.max_total_bytes=1000000000",
    )
    echo_cmd = python_module_cmd(
        "bench.echo_server", "--watch-stdin", "--lmdb", ctx.tmpdir(prefix="bench-mem-echo-put-")
    )
    env = lmdb.open(floor_dir, map_size=1 << 30, sync=True, metasync=True)
    with spawn(echo_cmd) as (_, echo_port), spawn(serve_cmd) as (_, ctxd_port):
        echo_channel = grpc.insecure_channel(f"127.0.0.1:{int(echo_port)}")
        channel = grpc.insecure_channel(f"127.0.0.1:{int(ctxd_port)}")
        try:
            grpc.channel_ready_future(echo_channel).result(timeout=10)
            grpc.channel_ready_future(channel).result(timeout=10)
            echo_call = echo_channel.unary_unary(METHOD, _registered_method=True)
            put_call = echo_channel.unary_unary(PUT_METHOD, _registered_method=True)
            payload = bytes(i % 251 for i in range(100))
            stub = memory_pb2_grpc.MemoryServiceStub(channel)
            stub.Set(memory_pb2.SetRequest(key="bench/get", value_json=VALUE), timeout=10)
            get_req = memory_pb2.GetRequest(key="bench/get")
            if stub.Get(get_req, timeout=10).record.value_json != VALUE:
                raise RuntimeError("Get returned a different value")
            floor_value = os.urandom(200)
            counter = itertools.count()
            lock = threading.Lock()

            def echo() -> object:
                return echo_call(payload, timeout=CALL_TIMEOUT_S)

            def echo_put() -> object:
                return put_call(floor_value, timeout=CALL_TIMEOUT_S)

            def raw_put() -> None:
                with env.begin(write=True) as txn:
                    txn.put(b"key-%010d" % next(counter), floor_value)

            def get() -> object:
                return stub.Get(get_req, timeout=CALL_TIMEOUT_S)

            def new_set() -> object:
                with lock:
                    i = next(counter)
                req = memory_pb2.SetRequest(key=f"bench/set/{i:010d}", value_json=VALUE)
                return stub.Set(req, timeout=CALL_TIMEOUT_S)

            # Floors and ctxd calls alternate in short blocks, so load that
            # drifts during the run hits both sides of every ratio alike.
            plan = [
                (FLOOR_ECHO, echo, n),
                (FLOOR_PUT, raw_put, n_set),
                (FLOOR_WRITE, echo_put, n_set),
                (GET, get, n),
                (SET, new_set, n_set),
            ]
            samples: dict[str, list[int]] = {name: [] for name, _, _ in plan}
            for _, fn, _count in plan:
                _timed_block(fn, warmup, [])
            gc.collect()
            for _ in range(rounds):
                for name, fn, count in plan:
                    _timed_block(fn, count // rounds, samples[name])

            common = {
                "deadline_s": CALL_TIMEOUT_S,
                "interleaved_rounds": rounds,
                "warmup": warmup,
            }
            ctxd = {
                **common,
                "store": "lmdb (sync=True, metasync=True)",
                "fs": filesystem_of(data),
                "value_bytes": len(VALUE),
                "client": "generated stub, grpc.insecure_channel sync unary",
                "server": "ctxd Sidecar (child process)",
            }
            echo_res = result_from_samples(
                samples[FLOOR_ECHO],
                name=FLOOR_ECHO,
                group="memory",
                extra={**common, "payload_bytes": len(payload), "server": "bench.echo_server"},
            )
            put_res = result_from_samples(
                samples[FLOOR_PUT],
                name=FLOOR_PUT,
                group="memory",
                extra={**common, "value_bytes": len(floor_value), "fs": filesystem_of(floor_dir)},
            )
            yield echo_res
            yield put_res
            yield result_from_samples(
                samples[FLOOR_WRITE],
                name=FLOOR_WRITE,
                group="memory",
                extra={
                    **common,
                    "request_bytes": len(floor_value),
                    "server": "bench.echo_server Put: one fsync'd LMDB put inline, then echo",
                },
            )
            yield Result(
                name=FLOOR_SET,
                group="memory",
                unit=put_res.unit,
                p50=echo_res.p50 + put_res.p50,
                p99=(echo_res.p99 or 0) + (put_res.p99 or 0),
                n=min(echo_res.n, put_res.n),
                extra={"synthetic": f"{FLOOR_ECHO} + {FLOOR_PUT}"},
            )
            yield result_from_samples(
                samples[GET], name=GET, group="memory", ratio_to=FLOOR_ECHO, extra=ctxd
            )
            yield result_from_samples(
                samples[SET],
                name=SET,
                group="memory",
                ratio_to=FLOOR_WRITE,
                extra={**ctxd, "write": "new key each call"},
            )

            yield from interleaved_throughput(
                [
                    (FLOOR_ECHO_TPUT, echo, None, common),
                    (GET_TPUT, get, FLOOR_ECHO_TPUT, ctxd),
                    (SET_TPUT, new_set, FLOOR_ECHO_TPUT, ctxd),
                ],
                CALLERS,
                seconds,
                rounds=tput_rounds,
                group="memory",
                warmup_seconds=warm_s,
            )
        finally:
            channel.close()
            echo_channel.close()
            env.close()


# -- server mode ---------------------------------------------------------------------
