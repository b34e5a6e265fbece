"""moto's S3 in server mode for the S3 benchmarks: real HTTP on a loopback port.

One helper so that every suite on S3 (contexts, index, replicas) talks to the
same kind of server, started the same way, with the same quiet logging.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

REGION = "us-east-1"


def credentials() -> None:
    """moto accepts any credentials; boto3 still wants some."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "bench")


@contextmanager
def moto_server() -> Iterator[str]:
    """Yield the endpoint URL of a ``ThreadedMotoServer`` in this process."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def create_bucket(endpoint: str, bucket: str) -> None:
    import boto3

    credentials()
    boto3.client("s3", endpoint_url=endpoint, region_name=REGION).create_bucket(Bucket=bucket)


def store_uri(endpoint: str, bucket: str, prefix: str = "ctxd", **params: str) -> str:
    """The ctxd store URI of ``bucket`` on ``endpoint`` (extra query ``params`` appended)."""
    query = "".join(f"&{k}={v}" for k, v in params.items())
    return f"s3://{bucket}/{prefix}?endpoint_url={endpoint}&region={REGION}{query}"
