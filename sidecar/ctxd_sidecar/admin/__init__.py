"""Admin verbs that talk to a running sidecar over gRPC.

``ctxd health``, ``ctxd contexts ...``, ``ctxd memory ...`` and ``ctxd watch``
are thin clients of the public API (no store access), so they work against
any sidecar an operator can reach: a pod's, through ``kubectl port-forward``
or ``kubectl exec``, or a local one. :func:`register` adds them to the
``ctxd`` parser; :func:`run` executes one.
"""

from ctxd_sidecar.admin.commands import VERBS, register, run

__all__ = ["VERBS", "register", "run"]
