"""The ``postgres://`` URI: ctxd's own options (a pydantic schema, checked by
the plugin door before the store opens), and the libpq URI without them.

Everything else in the URI (host, port, user, password, database, several
hosts for failover) is libpq's, so ``PGPASSWORD``, ``PGHOST`` and a passfile
work as they do for ``psql``.
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import ConfigDict, Field

from ctxd_sidecar.plugin import StoreOptions

#: PostgreSQL identifiers are at most 63 bytes; kept to plain ones so they
#: need no quoting rules in an operator's head.
Identifier = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]{0,50}$")]
Seconds = Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)]


class PostgresOptions(StoreOptions):
    """URI query options of a ``postgres://`` store (all optional)."""

    # ``schema`` is the option's name; the field cannot be (BaseModel has one).
    model_config = ConfigDict(populate_by_name=True)

    #: Most connections this sidecar holds open to the database.
    pool_size: int = Field(10, ge=1, le=1000)
    #: Seconds a statement may run before the server cancels it (the call
    #: then answers UNAVAILABLE).
    statement_timeout: Seconds = 10.0
    #: Seconds to wait for a connection (a new one, or a free one of the pool).
    connect_timeout: Seconds = 5.0
    #: Schema and table holding the keys; created on first start.
    schema_name: Identifier = Field("public", alias="schema")
    table: Identifier = "ctxd_kv"
    #: libpq's TLS mode.
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None = (
        None
    )
    #: Send a change notification (NOTIFY) with every write, so replicas'
    #: watchers wake at once instead of polling.
    notify: bool = True


def conninfo_of(uri: str) -> str:
    """The libpq URI: ctxd's options (the whole query) taken out."""
    parts = urlsplit(uri)
    return urlunsplit(("postgresql", parts.netloc, parts.path, "", ""))


def redacted(conninfo: str) -> str:
    """Where the store is, for logs: host, port and database, never a password."""
    parts = urlsplit(conninfo)
    host = parts.netloc.rpartition("@")[2] or "local socket"
    return f"postgres {host}{parts.path or ''}"
