"""The read of a 10,000-message context: restore, the first read after it,
warm reads, and their floors (rows described in :mod:`bench.ctxd_contexts`).

Run by the contexts group on the store its turns filled: each restore is a
fresh sidecar process on that store.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from bench.ctxd_rpc import CALL_TIMEOUT_S, open_channel, read_all, sidecar_cmd
from bench.harness import Context, Result, result_from_samples
from bench.procs import python_module_cmd, spawn

GROUP = "contexts"
#: The largest page_size GetContext takes (pages still stop at ~3 MiB).
MAX_PAGE_SIZE = 10_000


class BlobReader:
    """A paged read's replies from ``bench.echo_server``: the transport floor
    of that read (one call per page, no work on the server), each reply
    parsed as the client parses ctxd's."""

    def __init__(self, port: str) -> None:
        import grpc

        from bench.echo_server import BLOB_METHOD, KEEP_METHOD, MAX_BLOB

        limit = ("grpc.max_receive_message_length", MAX_BLOB)
        send = ("grpc.max_send_message_length", MAX_BLOB)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{int(port)}", options=[limit, send])
        grpc.channel_ready_future(self.channel).result(timeout=20)
        self.call = self.channel.unary_unary(BLOB_METHOD, _registered_method=True)
        self.keep = self.channel.unary_unary(KEEP_METHOD, _registered_method=True)
        self.kept: list[bytes] = []

    def hold(self, replies: list[bytes]) -> None:
        """Have the echo server hold these replies (the same bytes ctxd sent)."""
        self.kept = [b"#" + self.keep(r, timeout=CALL_TIMEOUT_S) for r in replies]

    def read(self, parse: Callable[[bytes], object]) -> None:
        """Every held reply, in order, each parsed with ``parse``."""
        for key in self.kept:
            parse(self.call(key, timeout=CALL_TIMEOUT_S))

    def close(self) -> None:
        self.channel.close()


def read_rows(
    ctx: Context,
    label: str,
    store: str,
    common: dict,
    big_conv: str,
    biggest: int,
    ask_store: Callable[[], None] | None = None,
) -> Iterator[Result]:
    """The rows of ``big_conv`` on ``store``; ``ask_store``: one request to a
    shared store (what a read at the default consistency asks first), timed
    with the read floor."""
    from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
    from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc

    restores = ctx.pick(full=5, quick=1)
    slices = ctx.pick(full=10, quick=2)
    # Restore: a fresh process per sample; the first GetContext restores.
    restore_ns: list[int] = []
    first_ns: list[int] = []
    slice_ns: list[int] = []
    max_page_ns: list[int] = []
    cached_ns: list[int] = []
    floor_ns: list[int] = []
    asked_floor_ns: list[int] = []
    npages: dict[int, int] = {}
    page_sizes: list[int] = []
    with contextlib.ExitStack() as stack:
        _, echo_port = stack.enter_context(
            spawn(python_module_cmd("bench.echo_server", "--watch-stdin"))
        )
        blobs = BlobReader(echo_port)
        stack.callback(blobs.close)
        for i in range(restores):
            with spawn(sidecar_cmd(store)) as (_, port):
                channel = open_channel(port)
                try:
                    stub = context_pb2_grpc.ContextServiceStub(channel)
                    req = pb.GetContextRequest(context_id=big_conv, view=pb.CONTEXT_VIEW_INFO)
                    t0 = time.perf_counter_ns()
                    info = stub.GetContext(req, timeout=CALL_TIMEOUT_S).info
                    restore_ns.append(time.perf_counter_ns() - t0)
                    if info.message_count < biggest:
                        raise RuntimeError(f"restored {info.message_count} messages")
                    t0 = time.perf_counter_ns()  # builds the messages the restore left
                    read_all(stub, big_conv, pb.CONTEXT_VIEW_SLICE, 0)
                    first_ns.append(time.perf_counter_ns() - t0)
                    if i == restores - 1:
                        for k in range(slices + 1):
                            for size, out in ((0, slice_ns), (MAX_PAGE_SIZE, max_page_ns)):
                                t0 = time.perf_counter_ns()
                                pages = read_all(stub, big_conv, pb.CONTEXT_VIEW_SLICE, size)
                                if k:  # the first round warms up
                                    out.append(time.perf_counter_ns() - t0)
                                npages[size] = len(pages)
                                if sum(len(p.slice) for p in pages) < biggest:
                                    raise RuntimeError("slice is short")
                                if size == 0 and not k:
                                    page_sizes = [p.ByteSize() for p in pages]
                                    blobs.hold([p.SerializeToString() for p in pages])
                            if label != "lmdb":  # a shared store: what asking it costs
                                t0 = time.perf_counter_ns()
                                read_all(
                                    stub,
                                    big_conv,
                                    pb.CONTEXT_VIEW_SLICE,
                                    0,
                                    pb.READ_CONSISTENCY_CACHED,
                                )
                                if k:
                                    cached_ns.append(time.perf_counter_ns() - t0)
                            t0 = time.perf_counter_ns()
                            blobs.read(pb.GetContextResponse.FromString)
                            if k:
                                floor_ns.append(time.perf_counter_ns() - t0)
                            if ask_store is not None:
                                t0 = time.perf_counter_ns()
                                ask_store()
                                blobs.read(pb.GetContextResponse.FromString)
                                if k:
                                    asked_floor_ns.append(time.perf_counter_ns() - t0)
                finally:
                    channel.close()
    floor_name = f"floor.grpc.pages.{label}.h{biggest}"
    yield result_from_samples(
        floor_ns,
        name=floor_name,
        group=GROUP,
        extra={
            "what": "the slice read's replies (the same bytes) from bench.echo_server, "
            "parsed as the client parses ctxd's",
            "pages": len(page_sizes),
            "bytes": sum(page_sizes),
        },
    )

    if asked_floor_ns:
        yield result_from_samples(
            asked_floor_ns,
            name=f"floor.grpc.pages_and_get.{label}.h{biggest}",
            group=GROUP,
            extra={
                "what": "one GET of an absent key from the same store, then the floor above: "
                "what a read that asks the shared store first cannot go under",
            },
        )

    def row(samples: list[int], name: str, ratio_to: str | None = None, **extra) -> Result:
        """A row of the 10,000-message context, named for this store and mark."""
        return result_from_samples(
            samples,
            name=f"{name}.{label}.h{biggest}",
            group=GROUP,
            ratio_to=ratio_to and f"{ratio_to}.{label}.h{biggest}",
            extra={**common, "messages": info.message_count, **extra},
        )

    view = "CONTEXT_VIEW_SLICE, every page"
    floor_of_slice = "floor.grpc.pages_and_get" if asked_floor_ns else "floor.grpc.pages"
    yield row(slice_ns, "ctxd.get_context.slice", floor_of_slice, view=f"{view} (default page size)", pages=npages[0])  # noqa: E501  # fmt: skip
    if cached_ns:
        yield row(cached_ns, "ctxd.get_context.slice_cached", "floor.grpc.pages", view=f"{view} (consistency CACHED: the store not asked first)")  # noqa: E501  # fmt: skip
    yield row(max_page_ns, "ctxd.get_context.slice_max_page", "ctxd.get_context.slice", view=f"{view} (page_size={MAX_PAGE_SIZE})", pages=npages[MAX_PAGE_SIZE])  # noqa: E501  # fmt: skip
    yield row(first_ns, "ctxd.get_context.first_slice", "ctxd.get_context.slice", what="the slice read right after the restore (it builds the messages)")  # noqa: E501  # fmt: skip
    yield row(restore_ns, "ctxd.restore", what="fresh sidecar process, first GetContext(INFO)")


def absent_get(endpoint: str, bucket: str) -> Callable[[], None]:
    """One GET of a key the bucket does not hold, as ctxd asks for the log
    record after its copy's version (boto3, as ctxd's S3 store uses)."""
    import boto3

    from bench.moto_s3 import REGION, credentials

    credentials()
    client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)

    def ask() -> None:
        try:
            client.get_object(Bucket=bucket, Key="ctxd/absent")
        except client.exceptions.NoSuchKey:
            pass

    ask()  # connects
    return ask


# -- server mode ---------------------------------------------------------------------
