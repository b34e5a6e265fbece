"""Generated protobuf and gRPC code for ``ctxd.v1`` (see scripts/gen_proto.sh).

Do not edit the generated modules; change ``proto/`` and regenerate.
"""

from ctxd_sidecar.api.ctxd.v1 import (  # noqa: F401
    context_pb2,
    context_pb2_grpc,
    memory_pb2,
    memory_pb2_grpc,
)
