"""Saying so when a sidecar is reachable by others and asks nothing of them.

A sidecar on loopback (or a unix socket) is reached by its own pod or host
only; on any other address, with no bearer token and no TLS, whoever can
route to it can read and rewrite every conversation. That may be intended
(a NetworkPolicy closes the port), so it is a warning, not a refusal.
"""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = {"localhost", "ip6-localhost", "ip6-loopback"}


def is_loopback(listen: str) -> bool:
    """Whether ``listen`` (host:port or unix:PATH) is reachable from this host only."""
    if listen.startswith("unix:"):
        return True
    host = listen.rpartition(":")[0].strip("[]")
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name, or "" / "0.0.0.0"-like wildcards: assume reachable


def exposure_warning(listen: str, *, token: bool, tls: bool) -> str | None:
    """The one line to log at WARNING at start, or None when there is nothing to say."""
    if token or tls or is_loopback(listen):
        return None
    return (
        f"listening on {listen} with no bearer token and no TLS: anyone who can reach "
        "this address can read and change every context; set auth_token_file (and TLS), "
        "or keep the port closed (see the deployment docs on NetworkPolicy)"
    )
