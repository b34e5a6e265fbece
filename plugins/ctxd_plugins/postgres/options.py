"""The ``postgres://`` URI: ctxd's own options, validated, and the libpq
connection string left once they are taken out.

Everything else in the URI (host, port, user, password, database, several
hosts for failover) is libpq's, so ``PGPASSWORD``, ``PGHOST`` and a passfile
work as they do for ``psql``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: PostgreSQL identifiers are at most 63 bytes; kept to plain ones so they
#: need no quoting rules in an operator's head.
_IDENTIFIER = r"^[a-z_][a-z0-9_]{0,50}$"


class PostgresOptions(BaseModel):
    """URI query options of a ``postgres://`` store (all optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Most connections this sidecar holds open to the database.
    pool_size: int = Field(10, ge=1, le=1000)
    #: Seconds a statement may run before the server cancels it (the call
    #: then answers UNAVAILABLE).
    statement_timeout: float = Field(10.0, gt=0, le=3600)
    #: Seconds to wait for a connection (a new one, or a free one of the pool).
    connect_timeout: float = Field(5.0, gt=0, le=600)
    #: Schema and table holding the keys; created on first start.
    schema_name: str = Field("public", alias="schema", pattern=_IDENTIFIER)
    table: str = Field("ctxd_kv", pattern=_IDENTIFIER)
    #: libpq's TLS mode.
    sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None = (
        None
    )
    #: Send a change notification (NOTIFY) with every write, so replicas'
    #: watchers wake at once instead of polling.
    notify: bool = True


#: Every option the URI may carry (the names operators write).
OPTION_NAMES = tuple(f.alias or name for name, f in PostgresOptions.model_fields.items())


def parse(uri: str, options: Mapping[str, str]) -> tuple[str, PostgresOptions]:
    """The libpq URI without ctxd's options, and those options validated.

    :raise ValueError: one line naming the option at fault.
    """
    try:
        opts = PostgresOptions.model_validate(dict(options))
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(p) for p in first["loc"]) or "?"
        if first["type"] == "extra_forbidden":
            known = ", ".join(OPTION_NAMES)
            raise ValueError(
                f"unknown postgres store option {name!r} (known options: {known})"
            ) from None
        raise ValueError(
            f"postgres store option {name}={options.get(name)!r}: {first['msg']}"
        ) from None
    parts = urlsplit(uri)
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in options]
    scheme = "postgresql" if parts.scheme.lower() in {"postgres", "postgresql"} else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(kept), "")), opts


def redacted(conninfo: str) -> str:
    """Where the store is, for logs: host, port and database, never a password."""
    parts = urlsplit(conninfo)
    host = parts.netloc.rpartition("@")[2] or "local socket"
    return f"postgres {host}{parts.path or ''}"
