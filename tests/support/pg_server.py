"""A real PostgreSQL for the suite: the one ``CTXD_TEST_PG_DSN`` names, or
one started from the machine's packages in a temporary directory.

PostgreSQL refuses to run as root, so as root the server runs as an
unprivileged system user (``postgres`` if the packages made one, else
``ctxdtest``, created here). It listens on a free loopback port with its
socket directory inside the temporary directory, trusts loopback (the suite
is its only client) and is stopped when the session ends.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass

#: Where Debian's packages put the server binaries (one folder per version).
DEBIAN_BINS = "/usr/lib/postgresql/*/bin"
USER_CANDIDATES = ("postgres", "ctxdtest")


def find_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(os.path.join(DEBIAN_BINS, name)), reverse=True)
    return candidates[0] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_user() -> str | None:
    """The unprivileged user to run the server as (None: we are not root)."""
    if os.geteuid() != 0:
        return None
    for name in USER_CANDIDATES:
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "ctxdtest"],
        check=True,
    )
    return "ctxdtest"


@dataclass
class PgServer:
    """A PostgreSQL server the suite may create databases on."""

    host: str
    port: int
    user: str
    data_dir: str | None = None
    run_as: str | None = None
    pg_ctl: str | None = None
    admin_dsn: str = ""
    _shared_db: str = ""

    def dsn(self, database: str = "postgres") -> str:
        return f"postgres://{self.user}@{self.host}:{self.port}/{database}"

    def fresh_store_uri(self, **options: object) -> str:
        """A ``postgres://`` store URI with a schema of its own (cheaper than a
        database: CREATE DATABASE copies a template, 0.5-1.5 s here)."""
        if not self._shared_db:
            self._shared_db = self.create_database()
        query = {"schema": f"t_{uuid.uuid4().hex[:16]}", "pool_size": 4, **options}
        joiner = "&" if "?" in self._shared_db else "?"
        return self._shared_db + joiner + "&".join(f"{k}={v}" for k, v in query.items())

    def create_database(self) -> str:
        """A fresh, empty database; its DSN."""
        import psycopg

        name = f"ctxd_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_dsn or self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name) if not self.admin_dsn else _with_database(self.admin_dsn, name)

    def _ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        assert self.pg_ctl and self.data_dir, "only a server this suite started can be controlled"
        cmd = [self.pg_ctl, "-D", self.data_dir, "-w", "-t", "60", *args]
        if self.run_as:
            cmd = ["runuser", "-u", self.run_as, "--", *cmd]
        return subprocess.run(
            cmd, check=check, capture_output=True, text=True, cwd=os.path.dirname(self.data_dir)
        )

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is cut."""
        self._ctl("restart", "-m", "fast", "-l", os.path.join(self.data_dir, "server.log"))

    def stop(self, mode: str = "immediate") -> None:
        if self.pg_ctl:
            self._ctl("stop", "-m", mode, check=False)

    def start(self) -> None:
        self._ctl("start", "-l", os.path.join(self.data_dir, "server.log"))


def _with_database(dsn: str, database: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, ""))


def unavailable_reason() -> str | None:
    """Why no PostgreSQL can be had here (None: one can)."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install -e '.[postgres]')"
    if os.environ.get("CTXD_TEST_PG_DSN"):
        return None
    if not (find_bin("initdb") and find_bin("pg_ctl")):
        return "PostgreSQL server packages are not installed (initdb/pg_ctl not found)"
    return None


def launch() -> PgServer:
    """The server the environment names, or a new one of our own."""
    dsn = os.environ.get("CTXD_TEST_PG_DSN")
    if dsn:
        return PgServer(host="", port=0, user="", admin_dsn=dsn)
    initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
    run_as = _server_user()
    base = tempfile.mkdtemp(prefix="ctxd-pg-")
    data, sockets = os.path.join(base, "data"), os.path.join(base, "run")
    os.makedirs(sockets)
    if run_as:
        shutil.chown(base, run_as)
        shutil.chown(sockets, run_as)

    def as_server(*cmd: str) -> None:
        full = ["runuser", "-u", run_as, "--", *cmd] if run_as else list(cmd)
        subprocess.run(full, check=True, capture_output=True, text=True, cwd=base)

    as_server(initdb, "-D", data, "-U", "ctxd", "--auth=trust", "-E", "UTF8", "--no-instructions")
    port = _free_port()
    with open(os.path.join(data, "postgresql.conf"), "a") as conf:
        conf.write(
            f"\nlisten_addresses = '127.0.0.1'\nport = {port}\n"
            f"unix_socket_directories = '{sockets}'\nmax_connections = 300\n"
            "shared_buffers = 32MB\n"
        )
    server = PgServer(
        host="127.0.0.1", port=port, user="ctxd", data_dir=data, run_as=run_as, pg_ctl=pg_ctl
    )
    server.start()
    return server


def cleanup(server: PgServer) -> None:
    server.stop()
    if server.data_dir:
        shutil.rmtree(os.path.dirname(server.data_dir), ignore_errors=True)
