"""Why the database refused the sidecar at start-up, in one line.

libpq reports a failed connection as one ``OperationalError`` without a
SQLSTATE, whatever the cause. The cause is recovered from what the failed
connection itself reports: the server's own FATAL message when the server
answered (wrong password, unknown role or database, no pg_hba.conf entry),
libpq's flags when the server asked for a password and none was given, and
otherwise the network, asked directly (:mod:`ctxd_plugins.netprobe`).
Messages name the user, database, host and port, never a password.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from ctxd_plugins.netprobe import why_unreachable
from ctxd_sidecar.plugin import StoreError

#: libpq's marker before the server's message in a connection error.
_FATAL = "FATAL:"


def refusal(
    exc: psycopg.Error,
    conninfo: str,
    timeout: float,
    translate: Callable[[psycopg.Error], StoreError],
) -> StoreError:
    """The store error for ``exc`` raised while connecting or creating the table."""
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return StoreError(
            f"the database user may not create or use the table (SQLSTATE {state}); "
            "grant it CREATE on the schema, or create the table as its owner"
        )
    if not isinstance(exc, psycopg.OperationalError) or state:
        return translate(exc)
    pgconn = getattr(exc, "pgconn", None)
    if pgconn is not None:
        said = _server_said(pgconn.error_message)
        if said:
            return StoreError(f"the database refused the connection: {said}")
        if pgconn.needs_password and not pgconn.password:
            user = _text(pgconn.user)
            return StoreError(f'the database wants a password for user "{user}" and none was given')
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return translate(exc)
    host = str(params.get("host") or "localhost").split(",")[0]
    port = str(params.get("port") or "5432").split(",")[0]
    if not host.startswith("/") and port.isdigit():
        reason = why_unreachable(host, int(port), timeout)
        if reason:
            return StoreError(reason)
    return translate(exc)


def _server_said(message: bytes | None) -> str:
    """The server's FATAL message in libpq's error text; "" if the server said none."""
    text = _text(message)
    _, marker, rest = text.partition(_FATAL)
    if not marker:
        return ""
    return rest.strip().splitlines()[0].strip() if rest.strip() else ""


def _text(raw: bytes | str | None) -> str:
    if raw is None:
        return ""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
