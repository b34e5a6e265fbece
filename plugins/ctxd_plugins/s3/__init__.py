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

from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import unquote, urlsplit

from pydantic import Field

from ctxd_sidecar.plugin import StoreOptions, store_hooks

if TYPE_CHECKING:
    from ctxd_plugins.s3.store import S3Store

#: Installed by the ``s3`` extra; imported only when an s3:// store opens.
EXTRA = "pip install '.[s3]' from a ctxd clone"

#: Seconds: positive and finite (``inf`` or ``nan`` would reach botocore).
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class S3Options(StoreOptions):
    """URI query options of an ``s3://`` store (all optional)."""

    #: URL of an S3-compatible server (MinIO, R2, Ceph…, which must support
    #: conditional writes); unset: AWS S3.
    endpoint_url: str | None = None
    #: The bucket's region; unset: boto3's (``AWS_REGION``, the profile).
    region: str | None = None
    #: False when the role may not list the bucket (the sidecar keeps an index).
    list: bool = True
    #: Bucket in the path or in the host name; S3-compatible servers often need ``path``.
    addressing_style: Literal["auto", "path", "virtual"] = "auto"
    #: Seconds to wait for a connection.
    connect_timeout: Seconds = 2.0
    #: Seconds to wait for an answer.
    read_timeout: Seconds = 10.0
    #: Attempts in all, the first included (standard retry mode).
    max_attempts: Annotated[int, Field(gt=0, strict=False)] = 4
    #: A named profile of the AWS config files for credentials; unset: boto3's chain.
    profile: str | None = None


def _open(uri: str, options: S3Options) -> S3Store:
    parts = urlsplit(uri)
    if not parts.netloc:
        raise ValueError("s3 store URI needs a bucket, e.g. s3://my-bucket/ctxd")
    try:
        from ctxd_plugins.s3.store import S3Store  # boto3 only for deployments on S3
    except ImportError as exc:
        raise ValueError(f"the s3 store needs boto3 ({exc.name} is missing): {EXTRA}") from None
    store = S3Store(
        parts.netloc,
        unquote(parts.path),
        endpoint_url=options.endpoint_url or None,
        region=options.region or None,
        can_list=options.list,
        addressing_style=options.addressing_style,
        connect_timeout=options.connect_timeout,
        read_timeout=options.read_timeout,
        max_attempts=options.max_attempts,
        profile=options.profile or None,
    )
    try:
        store.check()
    except BaseException:
        store.close()
        raise
    return store


ctxd_store_schemes, ctxd_open_store = store_hooks("s3", _open, S3Options)
