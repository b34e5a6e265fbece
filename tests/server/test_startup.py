"""Start-up refusals: exit 2 and one line on stderr, before the store is opened.

An operator reads the refusal, not a log of what start-up did before it;
and a sidecar that cannot serve (a second one on a port in use, say) must
not open, or write to, the store another may be serving.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ctxd_sidecar.config.loader import load_config
from ctxd_sidecar.server.app import Sidecar, StartupError
from tests.conftest import free_port


def refused(tmp_path: Path, *args: str) -> str:
    """Run ``ctxd serve`` on an LMDB store that must refuse; its one line."""
    data = tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "serve", "--store", f"lmdb://{data}", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxd: "), proc.stderr
    assert not data.exists(), "the store was opened before the refusal"
    return lines[0]


@pytest.fixture
def held_port():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def test_a_port_in_use_is_refused_before_the_store_opens(tmp_path, held_port):
    line = refused(tmp_path, "--listen", f"127.0.0.1:{held_port}")
    assert (
        line
        == f"ctxd: cannot start: cannot listen on 127.0.0.1:{held_port}: Address already in use"
    )


def test_a_metrics_port_in_use_is_refused_before_the_store_opens(tmp_path, held_port):
    line = refused(
        tmp_path, "--listen", "127.0.0.1:0", "--metrics-listen", f"127.0.0.1:{held_port}"
    )
    assert line == (
        f"ctxd: cannot start: cannot listen on 127.0.0.1:{held_port} (metrics_listen): "
        "Address already in use"
    )


def test_a_missing_token_file_is_refused_before_the_store_opens(tmp_path):
    missing = tmp_path / "missing-token"
    line = refused(tmp_path, "--listen", "127.0.0.1:0", "--set", f"auth_token_file={missing}")
    assert line == "ctxd: cannot start: cannot read auth_token_file"


def test_a_missing_tls_file_is_refused_before_the_store_opens(tmp_path):
    args = [f"tls_cert_file={tmp_path / 'cert.pem'}", f"tls_key_file={tmp_path / 'key.pem'}"]
    line = refused(tmp_path, "--listen", "127.0.0.1:0", "--set", args[0], "--set", args[1])
    assert line == "ctxd: cannot start: cannot read tls_key_file"


@pytest.mark.parametrize(
    "where, reason",
    [
        ("nodir/ctxd.sock", "No such file or directory"),
        ("file/ctxd.sock", "Not a directory"),
        ("file", "the path exists and is not a socket"),
    ],
)
def test_a_unix_socket_that_cannot_be_bound_is_refused(tmp_path, where, reason):
    (tmp_path / "file").write_text("not a directory")
    address = f"unix:{tmp_path / where}"
    line = refused(tmp_path, "--listen", address)
    assert line == f"ctxd: cannot start: cannot listen on {address}: {reason}"


def test_a_start_that_fails_after_binding_frees_its_ports(tmp_path):
    """In process, a failed start leaves nothing listening (a caller may retry)."""
    (tmp_path / "file").write_text("not a directory")
    port, metrics_port = free_port(), free_port()
    cfg = load_config(
        env={},
        overrides={
            "listen": f"127.0.0.1:{port}",
            "metrics_listen": f"127.0.0.1:{metrics_port}",
            "store": f"lmdb://{tmp_path / 'file' / 'data'}",
        },
    )
    with pytest.raises(StartupError, match="cannot open the lmdb store"):
        asyncio.run(Sidecar(cfg).start())
    for free in (port, metrics_port):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", free))
