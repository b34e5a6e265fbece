"""Bare ``grpc.aio`` echo server: the gRPC floor that ctxd calls are compared to.

It uses the same server stack as ctxd (``grpc.aio.server`` on 127.0.0.1 with
an ephemeral port) but does no work: requests are raw bytes (identity
serializers, no proto) echoed back. With ``--lmdb PATH`` it also answers
``Put``: the request bytes written by one fsync'd LMDB put, inline on the
event loop (the cheapest way a gRPC server can make a write durable), then
echoed: the write floor measured whole rather than as echo plus a put timed
on its own. ``Keep`` holds a reply's bytes that ``Blob`` then returns as
they are (``#<index>``): the floor of replies the client parses. Run as
``python -m bench.echo_server``; it prints the bound port as its first
stdout line and serves until SIGTERM, SIGINT or (with ``--watch-stdin``)
EOF on stdin.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading

import grpc

SERVICE = "bench.Echo"
METHOD = f"/{SERVICE}/Echo"
#: Replies with as many bytes as the request names (ASCII decimal), built once
#: per size: the floor of a read that moves megabytes.
BLOB_METHOD = f"/{SERVICE}/Blob"
#: Holds the request's bytes for ``Blob`` to return (answers the index, ASCII).
KEEP_METHOD = f"/{SERVICE}/Keep"
#: Largest Blob reply (the client must raise its receive limit to match).
MAX_BLOB = 64 * 1024 * 1024
_blobs: dict[int, bytes] = {}
_kept: list[bytes] = []
#: One fsync'd LMDB put of the request, then the echo (with ``--lmdb``).
PUT_METHOD = f"/{SERVICE}/Put"


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


async def _keep(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    _kept.append(request)
    return str(len(_kept) - 1).encode()


async def _blob(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    if request.startswith(b"#"):
        return _kept[int(request[1:])]
    size = min(int(request or b"0"), MAX_BLOB)
    blob = _blobs.get(size)
    if blob is None:
        blob = _blobs[size] = (bytes(range(251)) * (size // 251 + 1))[:size]
    return blob


def _put_handler(path: str):
    """``Put``: the request written under a new key, fsync'd (as ctxd's store is)."""
    import itertools

    import lmdb

    env = lmdb.open(path, map_size=1 << 30, sync=True, metasync=True)
    keys = itertools.count()

    async def put(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        with env.begin(write=True) as txn:
            txn.put(b"key-%010d" % next(keys), request)
        return request

    return put


def add_echo_service(server: grpc.aio.Server, lmdb_path: str | None = None) -> None:
    """Register the echo methods the way generated ``*_pb2_grpc`` code does."""
    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(_echo),
        "Blob": grpc.unary_unary_rpc_method_handler(_blob),
        "Keep": grpc.unary_unary_rpc_method_handler(_keep),
    }
    if lmdb_path:
        handlers["Put"] = grpc.unary_unary_rpc_method_handler(_put_handler(lmdb_path))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    if hasattr(server, "add_registered_method_handlers"):
        server.add_registered_method_handlers(SERVICE, handlers)


async def serve(host: str, port: int, watch_stdin: bool, lmdb_path: str | None = None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    if watch_stdin:

        def wait_eof() -> None:
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            except (OSError, ValueError):
                pass
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=wait_eof, name="stdin-watch", daemon=True).start()

    server = grpc.aio.server(
        options=[
            ("grpc.max_send_message_length", MAX_BLOB),
            ("grpc.max_receive_message_length", MAX_BLOB),
        ]
    )
    add_echo_service(server, lmdb_path)
    bound = server.add_insecure_port(f"{host}:{port}")
    if not bound:
        raise RuntimeError(f"could not bind {host}:{port}")
    await server.start()
    print(bound, flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop(grace=0.5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.echo_server", description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 = ephemeral (default)")
    ap.add_argument(
        "--watch-stdin", action="store_true", help="exit when stdin reaches EOF (parent died)"
    )
    ap.add_argument("--lmdb", metavar="PATH", help="also serve Put, into an LMDB env at PATH")
    args = ap.parse_args(argv)
    asyncio.run(serve(args.host, args.port, args.watch_stdin, args.lmdb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
