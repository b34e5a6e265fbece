"""The admin CLI's connection errors and pipes: what the clients say, ports
checked before dialling, no traceback when the reader leaves."""

from __future__ import annotations

import subprocess
import threading

from tests.ops.test_admin import CTXD, ctxd, one_line_error


def test_connection_errors_say_what_the_clients_say_and_ports_are_checked(tmp_path):
    """An HTTP port is named as one (the clients' words, not gRPC's); a port
    outside 1-65535 is a usage error, not a dial of another port."""
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    http = HTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{http.server_address[1]}"
        line = one_line_error(ctxd("contexts", "list", "--address", address, "--timeout", "5"))
        assert line == (
            f"ctxd: cannot connect to {address}: the server there does not speak gRPC "
            "(a metrics or HTTP port?)"
        )
    finally:
        http.shutdown()
    for port in ("99999", "0", "http"):
        line = one_line_error(ctxd("contexts", "list", "--address", f"127.0.0.1:{port}"), 2)
        assert "the port must be a number in 1-65535" in line


def test_a_reader_that_leaves_early_gets_no_traceback():
    """``ctxd plugins | head -1``: the pipe closes under the writer."""
    proc = subprocess.Popen([CTXD, "plugins"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
