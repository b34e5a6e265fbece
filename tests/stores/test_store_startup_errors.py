"""A store that cannot be opened stops ``ctxd serve`` with exit 2 and one
line naming the cause: wrong password, unknown role or database, nothing
listening (PostgreSQL); missing bucket, refused credentials, unreachable
endpoint (S3); an unusable LMDB directory. Against a real PostgreSQL server
and moto over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest

from tests.conftest import free_port, s3_uri

SECRET = "right-horse-battery"


def refusal(store: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "ctxd_sidecar", "serve", "--listen", "127.0.0.1:0", "--store", store],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
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
