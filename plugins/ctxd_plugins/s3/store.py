"""The S3 store itself (boto3); opened by :mod:`ctxd_plugins.s3`."""

from __future__ import annotations

import boto3
import botocore.config
import botocore.exceptions

from ctxd_sidecar.plugin import (
    Capability,
    Item,
    PreconditionFailed,
    Store,
    StoreError,
    StoreUnavailable,
)

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

    def _key(self, key: str) -> str:
        return self.prefix + key

    def get(self, key: str) -> Item | None:
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            return Item(resp["Body"].read(), resp["ETag"])
        except botocore.exceptions.ClientError as exc:
            if _code(exc) in {"NoSuchKey", "404"}:
                return None
            raise _translate(exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise _translate(exc) from None

    def put(self, key, value, *, if_version=None, if_absent=False) -> str:
        kwargs = {"Bucket": self.bucket, "Key": self._key(key), "Body": bytes(value)}
        if if_absent:
            kwargs["IfNoneMatch"] = "*"
        if if_version is not None:
            kwargs["IfMatch"] = if_version
        try:
            return self.client.put_object(**kwargs)["ETag"]
        except botocore.exceptions.ClientError as exc:
            if if_absent or if_version is not None:
                # 412: precondition failed; 409: a concurrent conditional
                # write won; 404: If-Match on a key that does not exist.
                if _status(exc) in {404, 409, 412}:
                    own = self._own_retried_write(exc, key, value)
                    if own is not None:
                        return own
                    raise PreconditionFailed("version does not match") from None
            raise _translate(exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise _translate(exc) from None

    def _own_retried_write(self, exc, key: str, value: bytes) -> str | None:
        """After a retried conditional PUT fails its precondition, tell our own
        first attempt (applied, but its reply lost) from another writer's:
        the object then holds exactly the bytes we sent. Callers write values
        that are unique per write (they carry timestamps and ids)."""
        if exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) == 0:
            return None
        current = self.get(key)
        if current is not None and current.value == bytes(value):
            return current.version
        return None

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
