"""A store that cannot be opened stops ``ctxd serve`` with exit 2 and one
line naming the cause: wrong password, unknown role or database, nothing
listening (PostgreSQL); missing bucket, refused credentials, unreachable
endpoint (S3); an unusable LMDB directory. Against a real PostgreSQL server
and moto over HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, s3_uri
from tests.support.tmpfs import mounted

SECRET = "right-horse-battery"


def refusal(store: str, env: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> str:
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxd_sidecar",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            store,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environ, **(env or {})},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and SECRET not in proc.stderr
    return lines[0]


# -- PostgreSQL ---------------------------------------------------------------------------
def pg_uri(pg_server, user: str = "", database: str = "postgres", password: str = "") -> str:
    who = user or pg_server.user
    if password:
        who += f":{password}"
    return f"postgres://{who}@{pg_server.host}:{pg_server.port}/{database}?connect_timeout=5"


@pytest.fixture
def password_role(pg_server) -> str:
    """A role that must give its password (scram), on the suite's own server."""
    if not pg_server.data_dir:
        pytest.skip("needs a PostgreSQL server the suite started (pg_hba.conf is edited)")
    import psycopg

    name = f"pw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{SECRET}'")
        hba = Path(pg_server.data_dir) / "pg_hba.conf"
        hba.write_text(f"host all {name} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        conn.execute("SELECT pg_reload_conf()")
    return name


def test_wrong_password_names_the_user(pg_server, password_role):
    line = refusal(pg_uri(pg_server, password_role, password="wrong-password"))
    assert line == (
        "ctxd: cannot start: cannot open the postgres store: the database refused the "
        f'connection: password authentication failed for user "{password_role}"'
    )


def test_missing_password_is_named(pg_server, password_role):
    line = refusal(pg_uri(pg_server, password_role), env={"PGPASSFILE": "/nonexistent/pgpass"})
    assert line == (
        "ctxd: cannot start: cannot open the postgres store: the database wants a password "
        f'for user "{password_role}" and none was given'
    )


def test_unknown_role_is_named(pg_server):
    line = refusal(pg_uri(pg_server, "nosuchrole"))
    assert line == (
        "ctxd: cannot start: cannot open the postgres store: the database refused the "
        'connection: role "nosuchrole" does not exist'
    )


def test_unknown_database_is_named(pg_server):
    line = refusal(pg_uri(pg_server, database="nosuchdb"))
    assert line == (
        "ctxd: cannot start: cannot open the postgres store: the database refused the "
        'connection: database "nosuchdb" does not exist'
    )


def test_nothing_listening_is_named(pg_server):
    port = free_port()
    line = refusal(f"postgres://ctxd@127.0.0.1:{port}/postgres?connect_timeout=5")
    assert line == (
        "ctxd: cannot start: cannot open the postgres store: nothing listening at "
        f"127.0.0.1:{port} (connection refused)"
    )


# -- S3 ---------------------------------------------------------------------------------
def test_missing_bucket_is_named(moto_endpoint):
    line = refusal(s3_uri(moto_endpoint, "no-such-bucket"))
    assert line == (
        "ctxd: cannot start: cannot open the s3 store: S3 bucket 'no-such-bucket' does not exist"
    )


def test_unreachable_endpoint_is_named_and_served_until_it_answers(spawn_sidecar):
    """An outage at start may pass: the sidecar serves (NOT_SERVING for its
    services until S3 answers) and its warning names the cause."""
    port = free_port()
    sc = spawn_sidecar("--store", s3_uri(f"http://127.0.0.1:{port}", "bucket"))
    assert sc.terminate() == 0
    err = sc.stderr()
    assert f"nothing listening at 127.0.0.1:{port} (connection refused)" in err, err[-2000:]
    assert "Traceback" not in err


def test_no_credentials_is_named(moto_endpoint, s3_bucket):
    line = refusal(
        s3_uri(moto_endpoint, s3_bucket),
        env={
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials",
            "AWS_CONFIG_FILE": "/nonexistent/config",
            "AWS_EC2_METADATA_DISABLED": "true",
        },
        drop=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"),
    )
    assert line == (
        "ctxd: cannot start: cannot open the s3 store: "
        "no S3 credentials found (environment, profile or role)"
    )


@pytest.fixture
def authenticating_moto() -> Iterator[str]:
    """moto in server mode that checks credentials (a process of its own: the
    setting is read once per process)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_unknown_access_key_is_named(authenticating_moto):
    line = refusal(
        s3_uri(authenticating_moto, "bucket"),
        env={"AWS_ACCESS_KEY_ID": "AKIAUNKNOWN", "AWS_SECRET_ACCESS_KEY": SECRET},
    )
    assert line == (
        "ctxd: cannot start: cannot open the s3 store: S3 does not know the access key "
        "(InvalidAccessKeyId); check the credentials"
    )


# -- LMDB -------------------------------------------------------------------------------
def test_lmdb_on_a_full_disk_is_refused_in_one_line(tmp_path):
    with mounted(tmp_path / "disk", "64k") as disk:
        (disk / "ballast").write_bytes(b"\0" * (64 * 1024))  # fills it
        line = refusal(f"lmdb://{disk / 'data'}")
    assert line.startswith(
        "ctxd: cannot start: cannot open the lmdb store: "
        "the disk holding the LMDB environment is full ("
    ), line
