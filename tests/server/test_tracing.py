"""OpenTelemetry on request: a real ``ctxd serve`` exports a span per RPC and
a child span per store operation to an OTLP/gRPC collector on loopback (a
real gRPC server speaking the OTLP trace service), with no payloads."""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as cpb
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb
from tests.conftest import free_port

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
trace_grpc = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc")


class Collector(trace_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list = []
        self.lock = threading.Lock()

    def Export(self, request, context):  # noqa: N802 - OTLP method name
        with self.lock:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    self.spans.extend(ss.spans)
        return trace_service.ExportTraceServiceResponse()


@pytest.fixture
def collector():
    port = free_port()
    server = grpc.server(futures.ThreadPoolExecutor(4))
    sink = Collector()
    trace_grpc.add_TraceServiceServicer_to_server(sink, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    yield f"http://127.0.0.1:{port}", sink
    server.stop(0)


def attrs(span) -> dict:
    return {a.key: a.value.string_value or a.value.int_value for a in span.attributes}


def test_spans_per_rpc_and_store_operation(spawn_sidecar, tmp_path, collector):
    endpoint, sink = collector
    sc = spawn_sidecar(
        "--store",
        f"lmdb://{tmp_path / 'data'}",
        "--set",
        f"otlp_endpoint={endpoint}",
        env={"OTEL_BSP_SCHEDULE_DELAY": "100"},
    )
    r = sc.running()
    r.memory.Set(mpb.SetRequest(key="traced", value_json='"a secret value"'), timeout=30)
    r.contexts.AppendTurn(
        cpb.AppendTurnRequest(
            context_id="conv-t", messages=[cpb.Message(user=cpb.UserMessage(text="hello"))]
        ),
        timeout=30,
    )
    with pytest.raises(grpc.RpcError):
        r.contexts.GetContext(cpb.GetContextRequest(context_id="nope"), timeout=30)
    assert sc.terminate() == 0  # shutdown exports what is left
    by_name: dict[str, list] = {}
    for s in sink.spans:
        by_name.setdefault(s.name, []).append(s)
    (set_span,) = by_name["ctxd.v1.MemoryService/Set"]
    assert attrs(set_span)["rpc.grpc.status_code"] == "OK"
    children = [s for s in sink.spans if s.parent_span_id == set_span.span_id]
    assert children and all(c.name.startswith("store ") for c in children)
    assert attrs(children[0])["db.system"] == "lmdb"
    (turn,) = by_name["ctxd.v1.ContextService/AppendTurn"]
    assert attrs(turn)["ctxd.context_id"] == "conv-t"
    (missing,) = by_name["ctxd.v1.ContextService/GetContext"]
    assert attrs(missing)["rpc.grpc.status_code"] == "NOT_FOUND"
    dumped = b"".join(s.SerializeToString() for s in sink.spans)
    assert b"a secret value" not in dumped and b"hello" not in dumped


def test_tracing_is_off_without_an_endpoint(start_sidecar, store_uri_for):
    sc = start_sidecar(store_uri_for("memory"))
    assert sc.extra["sidecar"].domain.tracing is None
