"""Why S3 refused the sidecar at start-up, in one line.

Told apart by S3's error codes and botocore's exception classes; an endpoint
that cannot be reached is asked directly (:mod:`ctxd_plugins.netprobe`), so
the warning says "nothing listening at host:port" rather than botocore's
class name. Messages name the bucket and endpoint, never a credential.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import botocore.exceptions

from ctxd_plugins.netprobe import why_unreachable
from ctxd_sidecar.plugin import StoreError, StoreUnavailable

#: Read once at start-up (its absence is the expected answer).
START_CHECK_KEY = "ctxd-start-check"

_CREDENTIALS = {
    "InvalidAccessKeyId": "S3 does not know the access key (InvalidAccessKeyId)",
    "SignatureDoesNotMatch": "S3 rejected the secret key (SignatureDoesNotMatch)",
    "ExpiredToken": "the S3 session token has expired (ExpiredToken)",
    "InvalidToken": "S3 rejected the session token (InvalidToken)",
}


def refusal(
    exc: Exception,
    bucket: str,
    client,
    translate: Callable[[Exception], StoreError],
) -> StoreError:
    """The store error for ``exc`` raised by the start-up read of ``bucket``
    through the boto3 ``client``: :class:`StoreUnavailable` when it may pass
    (no answer, 5xx), a plain :class:`StoreError` when only a change of
    configuration helps."""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code == "NoSuchBucket":
            return StoreError(f"S3 bucket {bucket!r} does not exist")
        if code in _CREDENTIALS:
            return StoreError(f"{_CREDENTIALS[code]}; check the credentials")
        if code in {"AccessDenied", "403"}:
            return StoreError(
                f"S3 denied access to bucket {bucket!r} (AccessDenied); "
                "check the credentials' policy"
            )
        return translate(exc)
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return StoreError("no S3 credentials found (environment, profile or role)")
    if isinstance(
        exc, (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectTimeoutError)
    ):
        url = urlsplit(client.meta.endpoint_url)
        if url.hostname:
            port = url.port or (443 if url.scheme == "https" else 80)
            timeout = client.meta.config.connect_timeout
            reason = why_unreachable(url.hostname, port, timeout)
            if reason:
                return StoreUnavailable(f"S3 endpoint unreachable: {reason}")
    return translate(exc)
