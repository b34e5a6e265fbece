"""Both clients against real sidecars: the token from CTXD_TOKEN_FILE (re-read
when the file changes), and failures that no retry can fix (a TLS port in
plaintext and the reverse, a metrics port, a gRPC server that is not ctxd,
a missing token) raised at once, naming the address and the cause, while
UNAVAILABLE is still retried."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from tests.conftest import free_port
from tests.server import test_security

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))

import ctxd_client  # noqa: E402
from ctxd_client import CannotConnect, Retry, Unauthenticated, Unimplemented  # noqa: E402

TOKEN = "the-right-token"


@pytest.fixture
def pki(tmp_path):
    """A CA, a server certificate for localhost and a client one (test_security's)."""
    return test_security.pki.__wrapped__(tmp_path)


@dataclass(frozen=True)
class CountingRetry(Retry):
    """The default policy with tiny pauses, counting each retry it is asked for."""

    initial_backoff: float = 0.01
    max_backoff: float = 0.02
    pauses: list = field(default_factory=list)

    def delay(self, attempt: int) -> float:
        self.pauses.append(attempt)
        return super().delay(attempt)


@pytest.fixture
def token_file(tmp_path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def authed(start_sidecar, store_uri_for):
    return start_sidecar(store_uri_for("memory"), auth_token=TOKEN)


@pytest.fixture
def tls_sidecar(start_sidecar, store_uri_for, pki):
    metrics = f"127.0.0.1:{free_port()}"
    sc = start_sidecar(
        store_uri_for("memory"),
        tls_cert_file=str(pki["srv"]),
        tls_key_file=str(pki["srv_key"]),
        metrics_listen=metrics,
    )
    sc.extra["metrics"] = metrics
    return sc


@pytest.fixture
def not_ctxd():
    """A gRPC server serving nothing of ctxd's."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)


def test_python_client_reads_the_token_file_and_rereads_it_when_it_changes(
    authed, token_file, monkeypatch
):
    monkeypatch.setenv("CTXD_TOKEN_FILE", str(token_file))
    monkeypatch.setenv("CTXD_TOKEN", "ignored-when-a-file-is-set")
    with ctxd_client.Client(authed.address) as client:
        client.memory_set("k", 1)
        token_file.write_text("a-rotated-token-the-sidecar-does-not-know")
        with pytest.raises(Unauthenticated) as err:
            client.memory_get("k")
        assert authed.address in str(err.value) and "CTXD_TOKEN_FILE" in str(err.value)
        token_file.write_text(TOKEN)
        assert client.memory_get("k").value_json == "1"


async def test_async_client_reads_the_token_file(authed, token_file, monkeypatch):
    monkeypatch.setenv("CTXD_TOKEN_FILE", str(token_file))
    async with ctxd_client.AsyncClient(authed.address) as client:
        await client.memory_set("k", 2)
        assert (await client.memory_get("k")).value_json == "2"


def _fails_at_once(address: str, cause: str, **kwargs) -> ctxd_client.CtxdError:
    retry = CountingRetry()
    with ctxd_client.Client(address, retry=retry, **kwargs) as client:
        with pytest.raises(ctxd_client.CtxdError) as err:
            client.append_turn("c", [{"user": {"text": "hi"}}])  # a call retried on UNAVAILABLE
    assert retry.pauses == [], f"retried: {err.value}"
    assert address in str(err.value) and cause in str(err.value), str(err.value)
    return err.value


def test_failures_no_retry_can_fix_are_raised_at_once_naming_address_and_cause(
    tls_sidecar,
    authed,
    not_ctxd,
    pki,
):
    e = _fails_at_once(tls_sidecar.address, "speaks TLS")
    assert isinstance(e, CannotConnect)
    e = _fails_at_once(authed.address, "does not speak TLS", root_ca=pki["ca"])
    assert isinstance(e, CannotConnect)
    e = _fails_at_once(tls_sidecar.extra["metrics"], "does not speak gRPC")
    assert isinstance(e, CannotConnect)
    e = _fails_at_once(not_ctxd, "not a ctxd sidecar")
    assert isinstance(e, Unimplemented)
    e = _fails_at_once(authed.address, "bearer token")
    assert isinstance(e, Unauthenticated)


def test_unavailable_is_still_retried():
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    retry = CountingRetry(attempts=3)
    with ctxd_client.Client(address, retry=retry) as client:
        with pytest.raises(ctxd_client.Unavailable) as err:
            client.append_turn("c", [{"user": {"text": "hi"}}])
    assert not isinstance(err.value, CannotConnect)
    assert retry.pauses == [0, 1]


# -- TypeScript ------------------------------------------------------------------------
NODE_SCRIPT = r"""
import { readFileSync, writeFileSync } from "node:fs";
import { CtxdClient, CtxdError } from "%(dist)s";
const cfg = JSON.parse(process.argv[2]);
const out = {};
// A retry would pause a minute: the script's own guard then reports it as retried.
const noRetry = { attempts: 8, initialBackoffMs: 60000, maxBackoffMs: 60000 };
setTimeout(() => { console.log(JSON.stringify({ ...out, stuck: true })); process.exit(3); }, 20000);
async function failure(name, options) {
  try {
    await new CtxdClient({ retry: noRetry, ...options }).appendTurn("c", [{ user: { text: "x" } }]);
    out[name] = "succeeded";
  } catch (e) { out[name] = e instanceof CtxdError ? e.message : String(e); }
}
// token file, re-read when it changes
const c = new CtxdClient({ address: cfg.authed });  // CTXD_TOKEN_FILE from the environment
await c.memorySet("k", 1);
writeFileSync(cfg.tokenFile, "a-rotated-token-the-sidecar-does-not-know");
try { await c.memoryGet("k"); out.rotated = "succeeded"; } catch (e) { out.rotated = e.message; }
writeFileSync(cfg.tokenFile, cfg.token);
out.restored = (await c.memoryGet("k")).valueJson;
// provider shapes in one turn, and JSON of what the client returns
await c.appendTurn("p", [{ user: { text: "first" } }]);
const held = await c.slice("p");
const t = await c.turn("p", { format: "openai", messagesJson: JSON.stringify([
  { role: "user", content: "hello" }, { role: "assistant", content: "hi there" }]) },
  { sinceVersion: held.version, sinceIncarnation: held.incarnation });
out.turn = { change: t.next.change, messages: t.next.messages };
out.json = JSON.parse(JSON.stringify({ held, t, slice: await c.slice("p") }));
await failure("plainToTls", { address: cfg.tls });
const tls = { ca: readFileSync(cfg.ca), serverName: "localhost" };
await failure("tlsToPlain", { address: cfg.authed, tls });
await failure("metrics", { address: cfg.metrics });
await failure("notCtxd", { address: cfg.notCtxd });
await failure("noToken", { address: cfg.authed, token: "" });
console.log(JSON.stringify(out));
process.exit(0);
"""


def test_typescript_client_token_file_provider_turn_json_and_failing_fast(
    authed,
    tls_sidecar,
    not_ctxd,
    token_file,
    pki,
    tmp_path,
):
    from tests.support.node_helpers import TS_CLIENT, npm_ci, require_node_and_npm

    require_node_and_npm()
    npm_ci(TS_CLIENT)
    script = tmp_path / "probe.mjs"
    script.write_text(NODE_SCRIPT % {"dist": (TS_CLIENT / "dist" / "index.js").as_uri()})
    cfg = {
        "authed": authed.address,
        "tls": tls_sidecar.address,
        "metrics": tls_sidecar.extra["metrics"],
        "notCtxd": not_ctxd,
        "ca": str(pki["ca"]),
        "token": TOKEN,
        "tokenFile": str(token_file),
    }
    r = subprocess.run(
        ["node", str(script), json.dumps(cfg)],
        env={"PATH": __import__("os").environ["PATH"], "CTXD_TOKEN_FILE": str(token_file)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert "UNAUTHENTICATED" in out["rotated"].upper() and authed.address in out["rotated"]
    assert out["restored"] == "1"
    assert out["turn"] == {
        "change": "append",
        "messages": [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi there"},
        ],
    }
    assert out["json"]["t"]["next"]["version"] == out["json"]["t"]["appended"]["version"]
    assert [m["user"]["text"] for m in out["json"]["slice"]["messages"][:2]] == ["first", "hello"]
    for name, cause, address in (
        ("plainToTls", "speaks TLS", cfg["tls"]),
        ("tlsToPlain", "does not speak TLS", cfg["authed"]),
        ("metrics", "does not speak gRPC", cfg["metrics"]),
        ("notCtxd", "not a ctxd sidecar", cfg["notCtxd"]),
        ("noToken", "bearer token", cfg["authed"]),
    ):
        assert cause in out[name] and address in out[name], (name, out[name])
