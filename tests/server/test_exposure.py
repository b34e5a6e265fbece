"""A sidecar reachable by others with neither token nor TLS says so at start."""

from __future__ import annotations

import json

import pytest

from ctxd_sidecar.server.exposure import exposure_warning, is_loopback


@pytest.mark.parametrize(
    "listen",
    ["127.0.0.1:50051", "127.9.9.9:1", "[::1]:50051", "localhost:50051", "unix:/run/ctxd.sock"],
)
def test_loopback_and_unix_sockets_need_no_warning(listen):
    assert is_loopback(listen)
    assert exposure_warning(listen, token=False, tls=False) is None


@pytest.mark.parametrize("listen", ["0.0.0.0:50051", "[::]:50051", "10.0.0.7:50051", "ctxd:50051"])
def test_other_addresses_without_token_or_tls_warn_in_one_line(listen):
    line = exposure_warning(listen, token=False, tls=False)
    assert line is not None and "\n" not in line
    assert listen in line and "no bearer token and no TLS" in line
    assert exposure_warning(listen, token=True, tls=False) is None
    assert exposure_warning(listen, token=False, tls=True) is None


def test_a_loopback_sidecar_starts_without_the_warning(spawn_sidecar):
    sp = spawn_sidecar("--store", "memory://")
    sp.terminate()
    lines = [json.loads(x) for x in sp.stderr().splitlines() if x.startswith("{")]
    assert any(x.get("message") == "serving" for x in lines)
    assert not [x for x in lines if "no bearer token" in x.get("message", "")]
