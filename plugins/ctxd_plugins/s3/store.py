"""The S3 store itself (boto3); opened by :mod:`ctxd_plugins.s3`.

Conditional writes know their outcome instead of guessing it: each carries a
write id of its own (object metadata, see :mod:`ctxd_plugins.s3.lineage`),
is sent without botocore's blind retries, and after a failure whose outcome
is open (a dropped connection, a 5xx) the store reads the object back and
decides by that id, never by comparing content.
"""

from __future__ import annotations

import logging
import random
import time

import boto3
import botocore.config
import botocore.exceptions

from ctxd_plugins.s3.lineage import WRITE_ID, Lineages, Outcome, judge
from ctxd_plugins.s3.refusal import START_CHECK_KEY, refusal
from ctxd_sidecar.plugin import (
    Capability,
    Item,
    PreconditionFailed,
    Store,
    StoreError,
    StoreUnavailable,
)

log = logging.getLogger(__name__)

#: A request failed on its connection: it may or may not have reached S3.
_CONNECTION_FAILED = (botocore.exceptions.HTTPClientError, botocore.exceptions.ConnectionError)
#: S3's limit on an object key, in UTF-8 bytes.
S3_MAX_KEY_BYTES = 1024


class S3Store(Store):
    name = "s3"
    max_key_bytes = S3_MAX_KEY_BYTES

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        can_list: bool = True,
        addressing_style: str = "auto",
        connect_timeout: float = 2.0,
        read_timeout: float = 10.0,
        max_attempts: int = 4,
        profile: str | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        # The object key is this prefix plus the sidecar's key: S3's limit
        # applies to the sum, so the room left for keys is smaller.
        self.max_key_bytes = S3_MAX_KEY_BYTES - len(self.prefix.encode())
        if self.max_key_bytes < 256:
            raise ValueError("s3 store prefix is too long; keep it well under 1024 bytes")
        self.endpoint_url = endpoint_url
        caps = {Capability.DELETE, Capability.CONDITIONAL_PUT, Capability.SHARED}
        if can_list:
            caps.add(Capability.LIST)
        self.capabilities = frozenset(caps)
        config = botocore.config.Config(
            region_name=region,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            # botocore's own "max_attempts" counts retries only.
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            s3={"addressing_style": addressing_style},
            max_pool_connections=32,
        )
        session = boto3.session.Session(profile_name=profile)
        self.client = session.client("s3", endpoint_url=endpoint_url, config=config)
        # Conditional writes retry themselves, after reading what happened.
        self.max_attempts = max_attempts
        once = config.merge(botocore.config.Config(retries={"total_max_attempts": 1}))
        self._once = session.client("s3", endpoint_url=endpoint_url, config=once)
        self._lineages = Lineages()

    def _key(self, key: str) -> str:
        return self.prefix + key

    def check(self) -> None:
        """One read at start-up, so a missing bucket or refused credentials stop
        the sidecar with their cause (see :func:`ctxd_plugins.s3.refusal.refusal`).
        An endpoint that does not answer yet may be passing (an outage, DNS at
        pod start): it is logged with its cause and the sidecar serves
        NOT_SERVING until S3 answers."""
        try:
            self.client.get_object(Bucket=self.bucket, Key=self._key(START_CHECK_KEY))
            return
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in {"NoSuchKey", "404"}:
                return
            error = refusal(exc, self.bucket, self.client, _translate)
        except botocore.exceptions.BotoCoreError as exc:
            error = refusal(exc, self.bucket, self.client, _translate)
        if isinstance(error, StoreUnavailable):
            log.warning("S3 does not answer at start; retrying", extra={"error": str(error)})
            return
        raise error

    def get(self, key: str) -> Item | None:
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            value = resp["Body"].read()
            self._lineages.seen(key, resp["ETag"], resp.get("Metadata") or {})
            return Item(value, resp["ETag"])
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in {"NoSuchKey", "404"}:
                return None
            raise _translate(exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise _translate(exc) from None

    def put(self, key, value, *, if_version=None, if_absent=False) -> str:
        kwargs = {"Bucket": self.bucket, "Key": self._key(key), "Body": bytes(value)}
        if not (if_absent or if_version is not None):
            kwargs["Metadata"] = self._lineages.new_write(key, None).metadata()
            try:
                return self.client.put_object(**kwargs)["ETag"]
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
                raise _translate(exc) from None
        if if_absent:
            kwargs["IfNoneMatch"] = "*"
        if if_version is not None:
            kwargs["IfMatch"] = if_version
        lineage = self._lineages.new_write(key, if_version, created=if_absent)
        kwargs["Metadata"] = lineage.metadata()
        sent = False  # an attempt may have reached S3 without our hearing back
        for attempt in range(self.max_attempts):
            if attempt:
                time.sleep(min(0.05 * 2**attempt, 1.0) * random.random())
            try:
                etag = self._once.put_object(**kwargs)["ETag"]
                self._lineages.remember(key, etag, lineage)
                return etag
            except botocore.exceptions.ClientError as exc:
                # 412: precondition failed; 409: a concurrent conditional
                # write won; 404: If-Match on a key that does not exist.
                if _status(exc) in {404, 409, 412} and not sent:
                    raise PreconditionFailed("version does not match") from None
                if _status(exc) not in {404, 409, 412} and not _open_outcome(exc):
                    raise _translate(exc) from None
                failure: Exception = exc
            except _CONNECTION_FAILED as exc:
                failure = exc  # maybe before, maybe after S3 applied it
            except botocore.exceptions.BotoCoreError as exc:
                raise _translate(exc) from None
            sent = True
            outcome, version = self._settle(key, lineage, if_version, if_absent)
            if outcome is Outcome.APPLIED:
                return version
            if outcome is Outcome.REFUSED:
                raise PreconditionFailed("version does not match") from None
            if outcome is Outcome.UNKNOWN:
                raise StoreUnavailable(
                    "S3 failed during a conditional write and what it holds now cannot "
                    "tell whether that write was applied"
                ) from None
            # Outcome.PENDING: the object is still as the write expects it: send again.
        raise _translate(failure) from None

    def _settle(self, key, lineage, if_version, if_absent) -> tuple[Outcome, str]:
        """What became of the conditional write ``lineage`` describes, read
        from the object as it is now (by write id, never by content)."""
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except botocore.exceptions.ClientError as exc:
            if _status(exc) != 404:
                return Outcome.UNKNOWN, ""
            head = None
        except botocore.exceptions.BotoCoreError:
            return Outcome.UNKNOWN, ""
        if head is None:
            return judge(lineage, None, None, if_version=if_version, if_absent=if_absent), ""
        etag = head["ETag"]
        meta = head.get("Metadata") or {}
        self._lineages.seen(key, etag, meta)
        outcome = judge(lineage, etag, meta, if_version=if_version, if_absent=if_absent)
        if outcome is Outcome.APPLIED and lineage.write_id != meta.get(WRITE_ID):
            # Applied, then replaced by a write that recorded ours as its
            # predecessor: our version is gone; any stale token will do.
            return outcome, f'"replaced-{lineage.write_id}"'
        return outcome, etag

    def delete(self, key, *, if_version=None) -> None:
        kwargs = {"Bucket": self.bucket, "Key": self._key(key)}
        if if_version is not None:
            kwargs["IfMatch"] = if_version
        try:
            self.client.delete_object(**kwargs)
        except botocore.exceptions.ClientError as exc:
            if if_version is not None and _status(exc) in {404, 409, 412}:
                raise PreconditionFailed("version does not match") from None
            raise _translate(exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise _translate(exc) from None

    def list(self, prefix, *, start_after="", limit=None) -> list[str]:
        if Capability.LIST not in self.capabilities:
            raise NotImplementedError("this S3 store was opened with list=false")
        if limit is not None and limit <= 0:
            return []
        full_prefix = self._key(prefix)
        params = {"Bucket": self.bucket, "Prefix": full_prefix}
        if start_after:
            # Exclusive, like the other stores: a key equal to ``start_after``
            # (even one equal to the prefix itself) is not returned.
            params["StartAfter"] = self._key(start_after)
        if limit is not None:
            params["PaginationConfig"] = {"MaxItems": limit, "PageSize": min(limit, 1000)}
        out: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**params):
                out.extend(obj["Key"][len(self.prefix) :] for obj in page.get("Contents", ()))
        except botocore.exceptions.ClientError as exc:
            raise _translate(exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise _translate(exc) from None
        return out[:limit] if limit is not None else out

    def close(self) -> None:
        self.client.close()

    def describe(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3 bucket {self.bucket!r}{where}"


def _open_outcome(exc: botocore.exceptions.ClientError) -> bool:
    """A failure after which the write may or may not have been applied."""
    status, code = _status(exc), _code(exc)
    return status >= 500 or code in {"SlowDown", "RequestTimeout", "ServiceUnavailable"}


def _code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _translate(exc: Exception) -> StoreError:
    """Map a boto error to a store error whose message carries no secrets."""
    if isinstance(exc, botocore.exceptions.ClientError):
        status, code = _status(exc), _code(exc)
        if status >= 500 or code in {"SlowDown", "RequestTimeout", "ServiceUnavailable"}:
            return StoreUnavailable(f"S3 is failing ({code or status})")
        if code in {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}:
            return StoreUnavailable(f"S3 refused access ({code}); check credentials and policy")
        if code == "NoSuchBucket":
            return StoreUnavailable("S3 bucket does not exist")
        return StoreError(f"S3 request failed ({code or status})")
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return StoreUnavailable("no S3 credentials found")
    return StoreUnavailable(f"S3 is unreachable ({type(exc).__name__})")
