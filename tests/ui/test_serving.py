"""``ctxd ui`` as a command and an HTTP server: its flags, its read-only
methods, and what the page says when the sidecar cannot be read."""

from __future__ import annotations

import re
import subprocess
import urllib.error
import urllib.request

import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc
from tests.conftest import free_port
from tests.ui import support


def get(url: str, method: str = "GET") -> tuple[int, str, dict]:
    req = urllib.request.Request(url, method=method, data=b"x" if method != "GET" else None)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), {k.lower(): v for k, v in exc.headers.items()}


def run_ui(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([support.CTXD, "ui", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "args",
    [["--bogus"], ["--listen", "nonsense"], ["--listen", "127.0.0.1:99999"], ["--timeout", "x"]],
)
def test_a_bad_flag_is_one_line_and_exit_2(args):
    r = run_ui(*args)
    assert r.returncode == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxd ui: "), r.stderr


def test_help_lists_the_flags():
    r = run_ui("--help")
    assert r.returncode == 0 and "--listen" in r.stdout and "--tls-ca-file" in r.stdout


@pytest.fixture(scope="module")
def plain(start_module_sidecar):
    sc = start_module_sidecar("lmdb")
    support.seed_demo(context_pb2_grpc.ContextServiceStub(sc.channel))
    return sc


def test_listening_beyond_the_loopback_warns(plain):
    port = free_port()
    proc = subprocess.Popen(
        [support.CTXD, "ui", "--address", plain.address, "--listen", f"0.0.0.0:{port}"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert line.startswith("ctxd ui: warning: listening on 0.0.0.0"), line


def test_every_method_but_get_and_head_is_405(plain):
    ui = support.UiProcess("--address", plain.address)
    info = context_pb2_grpc.ContextServiceStub(plain.channel).GetContext(
        pb.GetContextRequest(context_id="demo:tools", last_n=1), timeout=10
    )
    fold = f"/c/demo:tools/compactions/{info.context.compactions[0].id}"
    try:
        for path in ("/", "/c/demo:tools", fold, "/memory", "/static/ui.css"):
            assert get(ui.url + path)[0] == 200, path
            assert get(ui.url + path, "HEAD")[0] == 200, path
            for method in ("POST", "PUT", "PATCH", "DELETE"):
                status, _, headers = get(ui.url + path, method)
                assert status == 405, (path, method)
                assert headers.get("allow") == "GET, HEAD"
        status, body, headers = get(ui.url + "/")
        assert "default-src 'none'" in headers["content-security-policy"]
    finally:
        ui.stop()


def test_an_unreachable_sidecar_is_a_message_not_a_traceback():
    ui = support.UiProcess("--address", f"127.0.0.1:{free_port()}", "--timeout", "3")
    try:
        for path in ("/", "/c/demo:tools", "/memory"):
            status, body, _ = get(ui.url + path)
            assert status == 502, path
            assert "The sidecar cannot be reached" in body and "Traceback" not in body
    finally:
        err = ui.stop()
    assert "Traceback" not in err


def test_a_token_protected_sidecar(start_sidecar, tmp_path):
    sc = start_sidecar(f"lmdb://{tmp_path / 'a'}?map_size=64MiB", auth_token=support.TOKEN)
    meta = (("authorization", f"Bearer {support.TOKEN}"),)
    support.seed_demo(context_pb2_grpc.ContextServiceStub(sc.channel), metadata=meta)
    token_file = tmp_path / "token"
    token_file.write_text(support.TOKEN + "\n")
    cases = [
        ({}, 502, "The sidecar refused the token"),
        ({"CTXD_TOKEN": "wrong"}, 502, "UNAUTHENTICATED"),
        ({"CTXD_TOKEN": support.TOKEN}, 200, "demo:tools"),
        ({"CTXD_TOKEN_FILE": str(token_file)}, 200, "demo:tools"),
    ]
    for env, want, text in cases:
        ui = support.UiProcess("--address", sc.address, env=env)
        try:
            status, body, _ = get(ui.url + "/")
            assert (status, text in body) == (want, True), (env, status, body[-500:])
            assert "Traceback" not in body
        finally:
            ui.stop()


@pytest.fixture
def pki(tmp_path):
    """CA, server and client certificates (test_security's)."""
    from tests.server import test_security

    return test_security.pki.__wrapped__(tmp_path)


def test_mutual_tls_as_the_admin_verbs_have_it(start_sidecar, pki):
    sc = start_sidecar(
        "memory://",
        tls_cert_file=str(pki["srv"]),
        tls_key_file=str(pki["srv_key"]),
        tls_client_ca_file=str(pki["ca"]),
    )
    env = {"CTXD_TLS_CA_FILE": str(pki["ca"]), "CTXD_TLS_SERVER_NAME": "localhost"}
    client = ("--tls-cert-file", str(pki["cli"]), "--tls-key-file", str(pki["cli_key"]))
    ui = support.UiProcess("--address", sc.address, *client, env=env)
    without = support.UiProcess("--address", sc.address, "--timeout", "5", env=env)
    try:
        status, body, _ = get(ui.url + "/memory")
        assert status == 200 and "No keys" in body
        status, body, _ = get(without.url + "/memory")
        assert status == 502 and "cannot be reached" in body
    finally:
        ui.stop()
        without.stop()
    half = run_ui("--address", sc.address, "--tls-cert-file", str(pki["cli"]))
    assert half.returncode == 2 and "together" in half.stderr
    assert len(half.stderr.strip().splitlines()) == 1


def test_a_compaction_between_two_pages_says_to_open_again(plain):
    stub = context_pb2_grpc.ContextServiceStub(plain.channel)
    for t in range(3):
        msgs = [
            support.user(f"q{t}.{i}") if i % 2 == 0 else support.assistant("a") for i in range(40)
        ]
        stub.AppendTurn(pb.AppendTurnRequest(context_id="paging", messages=msgs), timeout=30)
    ui = support.UiProcess("--address", plain.address)
    try:
        status, first, _ = get(ui.url + "/c/paging?from=start")
        assert status == 200 and "q0.0" in first
        newer = re.search(r'class="newer" href="([^"]+)"', first).group(1).replace("&amp;", "&")
        assert get(ui.url + newer)[0] == 200
        stub.Compact(pb.CompactRequest(context_id="paging", keep_last=4), timeout=30)
        status, body, _ = get(ui.url + newer)
        assert status == 409 and "The conversation changed while you paged" in body
    finally:
        ui.stop()


def test_each_fold_says_what_its_compaction_added_to_the_ledger(plain):
    stub = context_pb2_grpc.ContextServiceStub(plain.channel)
    support.seed_demo(stub, "twice")
    support.seed_demo(stub, "twice")
    records = stub.GetContext(
        pb.GetContextRequest(context_id="twice", last_n=1), timeout=10
    ).context.compactions
    assert len(records) == 2
    added = records[1].artifacts - records[0].artifacts
    ui = support.UiProcess("--address", plain.address)
    try:
        for path in ("/c/twice", "/c/twice/compactions"):
            status, body, _ = get(ui.url + path)
            assert status == 200
            assert f"ledger {records[0].artifacts} artifacts" in body
            assert f"ledger {added:+d} → {records[1].artifacts} artifacts" in body
    finally:
        ui.stop()
