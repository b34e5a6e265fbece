"""Shared helpers for the memory tests: status details, a movable clock and
reaching the memory core of an in-process sidecar."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as pb


def fails(call: Callable[[], object]) -> grpc.RpcError:
    """Run a call that must fail; return its error."""
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def details(err: grpc.RpcError) -> list:
    status = rpc_status.from_call(err)
    assert status is not None, f"no google.rpc.Status on {err.code()}: {err.details()}"
    out = []
    for any_ in status.details:
        for cls in (
            error_details_pb2.BadRequest,
            error_details_pb2.QuotaFailure,
            error_details_pb2.ErrorInfo,
            error_details_pb2.RetryInfo,
        ):
            if any_.Is(cls.DESCRIPTOR):
                msg = cls()
                any_.Unpack(msg)
                out.append(msg)
    return out


def assert_bad_field(err: grpc.RpcError, field: str) -> None:
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (err.code(), err.details())
    violations = [
        v.field
        for d in details(err)
        if isinstance(d, error_details_pb2.BadRequest)
        for v in d.field_violations
    ]
    assert violations == [field], (violations, err.details())


def assert_cap(err: grpc.RpcError, cap: str, value: int) -> None:
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (err.code(), err.details())
    found = details(err)
    subjects = [
        v.subject
        for d in found
        if isinstance(d, error_details_pb2.QuotaFailure)
        for v in d.violations
    ]
    assert subjects == [cap], found
    info = [d for d in found if isinstance(d, error_details_pb2.ErrorInfo)]
    assert info and info[0].metadata["limit"] == cap and info[0].metadata["value"] == str(value)
    assert cap in err.details()


class Clock:
    """A wall clock the test moves forward."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def memory_core(running):
    """The StoreMemory backend of an in-process sidecar."""
    return running.extra["sidecar"].domain.memory.backend


def use_clock(running) -> Clock:
    clock = Clock()
    memory_core(running).clock = clock
    return clock


def call(running, coro):
    """Run a coroutine on an in-process sidecar's event loop."""
    return running.extra["handle"].call(coro)


def stop(running) -> None:
    """Stop an in-process sidecar before the fixture's teardown would."""
    handle = running.extra["handle"]
    handle.close()
    handle.close = lambda: None


def put(stub, key: str, value: str = "1", **kw) -> pb.MemoryRecord:
    return stub.Set(pb.SetRequest(key=key, value_json=value, **kw), timeout=30).record


def get(stub, key: str) -> pb.MemoryRecord:
    return stub.Get(pb.GetRequest(key=key), timeout=30).record


def list_all(stub, prefix: str = "", limit: int = 0, include_values: bool = False) -> list:
    out, token = [], ""
    while True:
        page = stub.List(
            pb.ListRequest(
                prefix=prefix, limit=limit, page_token=token, include_values=include_values
            ),
            timeout=60,
        )
        out.extend(page.records)
        token = page.next_page_token
        if not token:
            return out
