"""Cross-cutting concerns applied to every RPC, one layer per module.

They are interceptors in the gRPC sense, applied once per method when its
handler is registered (:mod:`.pipeline`): authentication (:mod:`.auth`),
admission and drain (:mod:`.gate`), request decoding (:mod:`.decode`), and
statuses, metrics, traces and the access log (:mod:`.calls`). The
composition in :mod:`ctxd_sidecar.server.app` orders them.
"""

from ctxd_sidecar.server.layers.auth import Auth, TokenFile
from ctxd_sidecar.server.layers.calls import Calls
from ctxd_sidecar.server.layers.decode import Decode
from ctxd_sidecar.server.layers.gate import Gate
from ctxd_sidecar.server.layers.pipeline import (
    HEALTH_CHECK,
    HEALTH_WATCH,
    STOPPING,
    WATCH_CONTEXT,
    Layer,
    Pipeline,
    Registrar,
)

__all__ = [
    "HEALTH_CHECK",
    "HEALTH_WATCH",
    "STOPPING",
    "WATCH_CONTEXT",
    "Auth",
    "TokenFile",
    "Calls",
    "Decode",
    "Gate",
    "Layer",
    "Pipeline",
    "Registrar",
]
