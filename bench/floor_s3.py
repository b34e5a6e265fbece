"""Raw boto3 floor: put_object/get_object of ~200-byte values against moto.

ctxd's remote tier talks S3 through boto3; these rows are what one boto3
call costs against a local moto server with nothing around it, so ctxd S3
figures can be reported as ratios to them. Moto runs in-process
(``ThreadedMotoServer`` on 127.0.0.1, ephemeral port), so the client and the
server share a GIL: this is a floor for the boto3 + HTTP path, not for S3.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from bench.harness import Context, Result, measure, register

VALUE_BYTES = 200
BUCKET = "bench-floor"

PUT = "s3.put_object"
GET = "s3.get_object"


@register("s3")
def s3_floor(ctx: Context) -> Iterator[Result]:
    import boto3
    from botocore.config import Config
    from moto.server import ThreadedMotoServer

    # werkzeug logs every request at INFO to stderr unless told otherwise
    logging.getLogger("werkzeug").setLevel(logging.WARNING)

    n = ctx.pick(full=1000, quick=50)
    warmup = ctx.pick(full=100, quick=10)

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=f"http://{host}:{port}",
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )
        try:
            client.create_bucket(Bucket=BUCKET)
            value = os.urandom(VALUE_BYTES)
            keys = [f"k/{i:010d}" for i in range(n + warmup)]
            common = {
                "value_bytes": VALUE_BYTES,
                "server": "moto ThreadedMotoServer (in-process, shares GIL)",
                "retries": "max_attempts=1",
            }

            put_keys = iter(keys)

            def put() -> None:
                client.put_object(Bucket=BUCKET, Key=next(put_keys), Body=value)

            yield measure(put, n, warmup, name=PUT, group="s3", extra=common)

            if client.get_object(Bucket=BUCKET, Key=keys[0])["Body"].read() != value:
                raise RuntimeError("get_object returned unexpected body")
            get_pos = [0]
            n_keys = len(keys)

            def get() -> None:
                i = get_pos[0]
                get_pos[0] = i + 1 if i + 1 < n_keys else 0
                client.get_object(Bucket=BUCKET, Key=keys[i])["Body"].read()

            yield measure(
                get, n, warmup, name=GET, group="s3", extra={**common, "body": "read fully"}
            )
        finally:
            client.close()
    finally:
        server.stop()
