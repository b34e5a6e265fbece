"""WatchContext streams, started when ``watch`` is called (so no event between
the call and the first read is missed), closed by ``cancel`` or ``with``."""

from __future__ import annotations

from typing import Any

import grpc

from ctxd_client._api.ctxd.v1 import context_pb2 as pb
from ctxd_client.errors import from_rpc_error


class Watch:
    """Iterator of WatchContextResponse; ends quietly once cancelled."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> Watch:
        return self

    def __next__(self) -> pb.WatchContextResponse:
        try:
            return next(self._stream)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.CANCELLED:
                raise StopIteration from None
            raise from_rpc_error(err) from None

    def cancel(self) -> None:
        self._stream.cancel()

    close = cancel

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class AsyncWatch:
    """Async iterator of WatchContextResponse; ends quietly once cancelled."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._it = stream.__aiter__()

    def __aiter__(self) -> AsyncWatch:
        return self

    async def __anext__(self) -> pb.WatchContextResponse:
        try:
            return await self._it.__anext__()
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.CANCELLED:
                raise StopAsyncIteration from None
            raise from_rpc_error(err) from None
        except StopAsyncIteration:
            raise

    def cancel(self) -> None:
        self._stream.cancel()

    async def aclose(self) -> None:
        self._stream.cancel()

    async def __aenter__(self) -> AsyncWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()
