"""Bearer-token auth, TLS/mTLS and the metrics endpoint, over real gRPC."""

from __future__ import annotations

import datetime
import urllib.request

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ctxd_sidecar.api.ctxd.v1 import memory_pb2, memory_pb2_grpc
from tests.conftest import free_port

TOKEN = "s3cr3t-token-value"


def _list(channel, metadata=None):
    return memory_pb2_grpc.MemoryServiceStub(channel).List(
        memory_pb2.ListRequest(), metadata=metadata, timeout=10
    )


@pytest.fixture
def authed(start_sidecar, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    return start_sidecar("memory://", auth_token_file=str(token_file))


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        [("authorization", "Bearer wrong")],
        [("authorization", TOKEN)],
        [("authorization", f"Bearer {TOKEN}x")],
        [("authorization", f"Basic {TOKEN}")],
        [("authorization", f"Bearer  {TOKEN}")],
    ],
    ids=["none", "wrong", "no-scheme", "longer", "other-scheme", "two-spaces"],
)
def test_requests_without_the_right_token_are_unauthenticated(authed, metadata):
    with pytest.raises(grpc.RpcError) as err:
        _list(authed.channel, metadata)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert TOKEN not in err.value.details()


def test_right_token_is_accepted_and_health_is_exempt(authed):
    for scheme in ("Bearer", "bearer", "BEARER"):  # a scheme's case does not matter
        _list(authed.channel, [("authorization", f"{scheme} {TOKEN}")])
    resp = health_pb2_grpc.HealthStub(authed.channel).Check(health_pb2.HealthCheckRequest())
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_token_from_environment_setting(start_sidecar):
    sc = start_sidecar("memory://", auth_token=TOKEN)
    with pytest.raises(grpc.RpcError) as err:
        _list(sc.channel)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    _list(sc.channel, [("authorization", f"Bearer {TOKEN}")])


# -- TLS ----------------------------------------------------------------------------
def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject_cn, key, issuer_cert=None, issuer_key=None, *, ca=False, san=None):
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False
        )
    return builder.sign(issuer_key or key, hashes.SHA256())


def _pem(obj) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return obj.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.fixture
def pki(tmp_path):
    ca_key = _key()
    ca = _cert("ctxd test CA", ca_key, ca=True)
    srv_key = _key()
    srv = _cert("localhost", srv_key, ca, ca_key, san="localhost")
    cli_key = _key()
    cli = _cert("agent", cli_key, ca, ca_key)
    files = {}
    for name, obj in {
        "ca": ca,
        "srv": srv,
        "srv_key": srv_key,
        "cli": cli,
        "cli_key": cli_key,
    }.items():
        path = tmp_path / f"{name}.pem"
        path.write_bytes(_pem(obj))
        files[name] = path
    return files


def _tls_channel(address, pki, client_cert=True):
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki["ca"].read_bytes(),
        private_key=pki["cli_key"].read_bytes() if client_cert else None,
        certificate_chain=pki["cli"].read_bytes() if client_cert else None,
    )
    return grpc.secure_channel(
        address, creds, options=[("grpc.ssl_target_name_override", "localhost")]
    )


def test_tls(start_sidecar, pki):
    sc = start_sidecar("memory://", tls_cert_file=str(pki["srv"]), tls_key_file=str(pki["srv_key"]))
    with _tls_channel(sc.address, pki, client_cert=False) as ch:
        _list(ch)
    with grpc.insecure_channel(sc.address) as plain, pytest.raises(grpc.RpcError) as err:
        _list(plain)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mtls_requires_a_client_certificate(start_sidecar, pki):
    sc = start_sidecar(
        "memory://",
        tls_cert_file=str(pki["srv"]),
        tls_key_file=str(pki["srv_key"]),
        tls_client_ca_file=str(pki["ca"]),
    )
    with _tls_channel(sc.address, pki, client_cert=True) as ch:
        _list(ch)
    with (
        _tls_channel(sc.address, pki, client_cert=False) as ch,
        pytest.raises(grpc.RpcError) as err,
    ):
        _list(ch)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


# -- metrics ------------------------------------------------------------------------
def test_metrics_endpoint_counts_rpcs_by_method_and_code(start_sidecar):
    port = free_port()
    sc = start_sidecar("memory://", metrics_listen=f"127.0.0.1:{port}")
    _list(sc.channel)
    with pytest.raises(grpc.RpcError):
        memory_pb2_grpc.MemoryServiceStub(sc.channel).Get(memory_pb2.GetRequest(key=""), timeout=10)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    labels = 'method="List",service="ctxd.v1.MemoryService"'
    assert f'ctxd_rpc_requests_total{{code="OK",{labels}}}' in body
    assert f'ctxd_rpc_latency_seconds_bucket{{code="OK",le="0.0002",{labels}}}' in body
    assert "ctxd_store_operation_seconds" in body
