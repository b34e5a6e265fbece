"""``s3://BUCKET/PREFIX``: objects in an S3 (or S3-compatible) bucket.

Several sidecars may share one bucket: conditional writes (If-None-Match /
If-Match) make every racing write either win or fail cleanly. Credentials
come from the standard boto3 chain (environment, profile, instance or pod
role), never from the URI.

Options (URI query): ``endpoint_url``, ``region``, ``list`` (``true``; set
``false`` when the role may not list the bucket: the sidecar then serves
listing from its own index), ``addressing_style`` (``auto``/``path``/
``virtual``), ``connect_timeout`` and ``read_timeout`` (seconds, default 2
and 10), ``max_attempts`` (standard retry mode; attempts in all, the first
included, as in the AWS config file; default 4), ``profile``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from ctxd_sidecar.storeplugin import store_hooks

if TYPE_CHECKING:
    from ctxd_plugins.s3.store import S3Store

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
#: Installed by the ``s3`` extra; imported only when an s3:// store opens.
EXTRA = "pip install 'ctxd-sidecar[s3]'"


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError(f"s3 store option {name}={raw!r} must be true or false")


def _number(options: Mapping[str, str], name: str, default: float) -> float:
    """A positive, finite number (``inf`` or ``nan`` would reach botocore)."""
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"s3 store option {name}={raw!r} must be a number") from None
    if not math.isfinite(value):
        raise ValueError(f"s3 store option {name}={raw!r} must be a finite number")
    if value <= 0:
        raise ValueError(f"s3 store option {name} must be positive")
    return value


def _count(options: Mapping[str, str], name: str, default: int) -> int:
    """A positive whole number (``2.5`` attempts is a mistake, not 2)."""
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"s3 store option {name}={raw!r} must be a whole number") from None
    if value <= 0:
        raise ValueError(f"s3 store option {name} must be positive")
    return value


def _open(uri: str, options: Mapping[str, str]) -> S3Store:
    parts = urlsplit(uri)
    if not parts.netloc:
        raise ValueError("s3 store URI needs a bucket, e.g. s3://my-bucket/ctxd")
    try:
        from ctxd_plugins.s3.store import S3Store  # boto3 only for deployments on S3
    except ImportError as exc:
        raise ValueError(f"the s3 store needs boto3 ({exc.name} is missing): {EXTRA}") from None
    return S3Store(
        parts.netloc,
        unquote(parts.path),
        endpoint_url=options.get("endpoint_url") or None,
        region=options.get("region") or None,
        can_list=_flag(options, "list", True),
        addressing_style=options.get("addressing_style", "auto"),
        connect_timeout=_number(options, "connect_timeout", 2.0),
        read_timeout=_number(options, "read_timeout", 10.0),
        max_attempts=_count(options, "max_attempts", 4),
        profile=options.get("profile") or None,
    )


ctxd_store_schemes, ctxd_open_store = store_hooks(
    "s3",
    _open,
    options=(
        "endpoint_url",
        "region",
        "list",
        "addressing_style",
        "connect_timeout",
        "read_timeout",
        "max_attempts",
        "profile",
    ),
)
