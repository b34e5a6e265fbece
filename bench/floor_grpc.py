"""gRPC floor: unary echo latency and throughput against ``bench.echo_server``.

This is the cost of a round trip through grpc.aio + a synchronous
``grpc.insecure_channel`` client with ~100-byte payloads and no work on
either side; ctxd RPC figures are reported as ratios to these rows.
The server runs in a child process so client and server do not share a GIL.
"""

from __future__ import annotations

from collections.abc import Iterator

from bench.harness import Context, Result, measure, register, throughput
from bench.procs import python_module_cmd, spawn

PAYLOAD_BYTES = 100
CALL_TIMEOUT_S = 10.0  # deadline set on every call, as a real client would
CALLERS = (1, 4, 16)

LATENCY = "grpc.echo.unary"


def tput_name(callers: int) -> str:
    return f"grpc.echo.tput.c{callers}"


@register("grpc")
def grpc_echo_floor(ctx: Context) -> Iterator[Result]:
    import grpc

    from bench.echo_server import METHOD

    n = ctx.pick(full=5000, quick=200)
    warmup = ctx.pick(full=500, quick=20)
    seconds = ctx.pick(full=5.0, quick=0.5)
    warmup_s = ctx.pick(full=1.0, quick=0.1)
    payload = bytes(i % 251 for i in range(PAYLOAD_BYTES))

    with spawn(python_module_cmd("bench.echo_server", "--watch-stdin")) as (proc, line):
        port = int(line)
        target = f"127.0.0.1:{port}"
        channel = grpc.insecure_channel(target)
        try:
            grpc.channel_ready_future(channel).result(timeout=10)
            call = channel.unary_unary(METHOD, _registered_method=True)
            if call(payload, timeout=CALL_TIMEOUT_S) != payload:
                raise RuntimeError("echo server returned a different payload")

            def once() -> bytes:
                return call(payload, timeout=CALL_TIMEOUT_S)

            common = {
                "payload_bytes": PAYLOAD_BYTES,
                "deadline_s": CALL_TIMEOUT_S,
                "server": "grpc.aio (child process)",
                "client": "grpc.insecure_channel sync unary",
            }
            yield measure(once, n, warmup, name=LATENCY, group="grpc", extra=common)
            for c in CALLERS:
                yield throughput(
                    once,
                    c,
                    seconds,
                    warmup_seconds=warmup_s,
                    name=tput_name(c),
                    group="grpc",
                    ratio_to=None if c == CALLERS[0] else tput_name(CALLERS[0]),
                    extra={**common, "channel": "one channel shared by all callers"},
                )
        finally:
            channel.close()
