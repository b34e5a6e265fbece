"""Memory.List pages fit a client with default channel options (4 MiB)
however large the values: 64 values of 64 KiB with keys and metadata."""

from __future__ import annotations

import grpc

from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2_grpc

DEFAULT_LIMIT = 4 * 1024 * 1024


def test_pages_with_values_fit_a_default_client(start_sidecar, tmp_path):
    sc = start_sidecar(f"lmdb://{tmp_path / 'data'}", memory__max_value_bytes=65536)
    value = '"' + "v" * (65536 - 2) + '"'
    for i in range(64):
        sc.memory.Set(pb.SetRequest(key=f"big/{i:02d}-" + "k" * 200, value_json=value, by="agent"))
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(sc.address))  # defaults
    keys, token, pages = [], "", 0
    while True:
        r = stub.List(
            pb.ListRequest(prefix="big/", include_values=True, limit=1000, page_token=token)
        )
        assert r.ByteSize() < DEFAULT_LIMIT
        assert all(rec.value_json == value for rec in r.records)
        keys += [rec.key for rec in r.records]
        pages += 1
        token = r.next_page_token
        if not token:
            break
    assert pages >= 2 and len(keys) == 64 == len(set(keys))
