"""OpenTelemetry tracing, on request: a span per RPC and per store operation.

Set ``otlp_endpoint`` (an OTLP/gRPC collector, ``http://host:4317`` plaintext
or ``https://…``) and ctxd exports spans in batches: one SERVER span per RPC
(``ctxd.v1.ContextService/AppendTurn``, with ``rpc.*`` attributes, the gRPC
status and the context id) and, inside it, one span per store operation
(``store put``, with the backend and, on failure, the error kind). Spans
never carry payloads or tokens. The SDK is the ``otel`` extra, imported only
when tracing is configured; without an endpoint nothing here runs.
"""

from __future__ import annotations

import time
from typing import Any

from ctxd_sidecar.config import Config

EXTRA = "pip install '.[otel]' from a ctxd clone"


class Tracing:
    """The tracer provider and the two places ctxd makes spans."""

    def __init__(self, config: Config) -> None:
        try:
            from opentelemetry import context, trace
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise ValueError(
                f"otlp_endpoint needs OpenTelemetry ({exc.name} is missing): {EXTRA}"
            ) from None
        endpoint = config.otlp_endpoint
        resource = Resource.create(
            {"service.name": config.otel_service_name, "service.instance.id": config.instance}
        )
        self.provider = TracerProvider(resource=resource)
        exporter = OTLPSpanExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"))
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("ctxd")
        self._trace, self._context = trace, context

    # -- RPCs (called by the calls layer, server/layers/calls.py) -------------------------
    def start_rpc(self, service: str, method: str) -> tuple[Any, object]:
        span = self.tracer.start_span(
            f"{service}/{method}",
            kind=self._trace.SpanKind.SERVER,
            attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": method},
        )
        token = self._context.attach(self._trace.set_span_in_context(span))
        return span, token

    def end_rpc(self, span: Any, token: object, code: str, context_id: str) -> None:
        span.set_attribute("rpc.grpc.status_code", code)
        if context_id:
            span.set_attribute("ctxd.context_id", context_id)
        if code != "OK":
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, code))
        span.end()
        try:
            self._context.detach(token)
        except ValueError:  # ended in another context (a stream): the span still ends
            pass

    # -- store operations (a StoreObserver) -----------------------------------------------
    def store_op(self, backend: str, op: str, seconds: float, error_kind: str | None) -> None:
        """A child of the current RPC's span, timed as the operation was."""
        end = time.time_ns()
        span = self.tracer.start_span(
            f"store {op}",
            start_time=end - int(seconds * 1e9),
            attributes={"db.system": backend, "ctxd.store.op": op},
        )
        if error_kind is not None:
            span.set_attribute("ctxd.store.error", error_kind)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error_kind))
        span.end(end_time=end)

    def shutdown(self) -> None:
        """Export what is left (called at the end of shutdown)."""
        self.provider.shutdown()


def setup(config: Config) -> Tracing | None:
    """Tracing when ``otlp_endpoint`` is set, else None."""
    return Tracing(config) if config.otlp_endpoint else None
