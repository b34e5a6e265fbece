"""Talking to a real ctxd from the bench: its command, a channel, a paged read."""

from __future__ import annotations

from bench.procs import python_module_cmd

CALL_TIMEOUT_S = 30.0


def sidecar_cmd(store: str, *settings: str) -> list[str]:
    args = ["--store", store]
    # The workload measures appends to long histories: no automatic compaction.
    for s in ("contexts.auto_compact=false", *settings):
        args += ["--set", s]
    return python_module_cmd("bench.ctxd_server", *args)


def open_channel(port: str):
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


def read_all(stub, cid: str, view: int, page_size: int = 0, consistency: int = 0) -> list:
    """Every page of ``view`` of ``cid``, in order (0: the default page size
    and consistency)."""
    from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb

    common = {"context_id": cid, "view": view, "page_size": page_size}
    req = pb.GetContextRequest(**common, consistency=consistency)
    pages = [stub.GetContext(req, timeout=CALL_TIMEOUT_S)]
    while pages[-1].next_page_token:
        req = pb.GetContextRequest(**common, page_token=pages[-1].next_page_token)
        pages.append(stub.GetContext(req, timeout=CALL_TIMEOUT_S))
    return pages
