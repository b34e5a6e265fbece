"""What the page reads from the sidecar: async gRPC calls over one channel,
each carrying the token and a deadline. A failed call becomes
:class:`Unavailable` (the page says what went wrong) or :class:`NotFound`."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
from grpc import aio

from ctxd_sidecar.admin.connect import Target
from ctxd_sidecar.api.ctxd.v1 import context_pb2 as pb
from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc, memory_pb2_grpc
from ctxd_sidecar.api.ctxd.v1 import memory_pb2 as mpb

#: Transcript messages on one page.
PAGE = 50
#: Provider shapes the slice view offers, by the name in the URL.
FORMATS = {
    "ctxd": pb.MESSAGE_FORMAT_CTXD,
    "openai": pb.MESSAGE_FORMAT_OPENAI,
    "anthropic": pb.MESSAGE_FORMAT_ANTHROPIC,
    "responses": pb.MESSAGE_FORMAT_OPENAI_RESPONSES,
}


class Unavailable(Exception):
    """The sidecar could not answer: a title and one line for the page."""

    def __init__(self, title: str, detail: str, status: int = 502) -> None:
        super().__init__(f"{title}: {detail}")
        self.title = title
        self.detail = detail
        self.status = status


class NotFound(Exception):
    pass


def _explain(exc: grpc.RpcError, address: str) -> Exception:
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else "") or "no message"
    if code == grpc.StatusCode.NOT_FOUND:
        return NotFound(details)
    if code == grpc.StatusCode.UNAVAILABLE:
        return Unavailable(
            "The sidecar cannot be reached",
            f"{address} did not answer ({details}). Is it running, and is --address right?",
        )
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return Unavailable(
            "The sidecar refused the token",
            f"{code.name}: {details}. Set CTXD_TOKEN or CTXD_TOKEN_FILE to the sidecar's token.",
        )
    if code == grpc.StatusCode.ABORTED:
        return Unavailable(
            "The conversation changed while you paged",
            f"{details}. Open it again from its latest turn or its first page.",
            409,
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Unavailable("The sidecar did not answer in time", f"{address}: {details}")
    return Unavailable("The sidecar answered with an error", f"{code.name}: {details}")


@dataclass
class TranscriptPage:
    info: pb.ContextInfo
    context: pb.Context
    messages: list[pb.Message]
    #: Live messages after the first one shown (0: this page ends the transcript).
    after: int
    #: Live messages before the first one shown.
    before: int
    #: Reading from the start: the token of the next (newer) page, if any.
    next_token: str = ""


@dataclass
class Sidecar:
    target: Target
    channel: aio.Channel | None = field(default=None, init=False)

    def _channel(self) -> aio.Channel:
        if self.channel is None:
            t = self.target
            options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
            if t.server_name:
                options.append(("grpc.ssl_target_name_override", t.server_name))
            if t.secure:
                creds = grpc.ssl_channel_credentials(
                    root_certificates=t.ca, private_key=t.key, certificate_chain=t.cert
                )
                self.channel = aio.secure_channel(t.address, creds, options=options)
            else:
                self.channel = aio.insecure_channel(t.address, options=options)
        return self.channel

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()

    async def _call(self, service: str, method: str, request):
        channel = self._channel()
        stub = (
            context_pb2_grpc.ContextServiceStub(channel)
            if service == "contexts"
            else memory_pb2_grpc.MemoryServiceStub(channel)
        )
        try:
            return await getattr(stub, method)(
                request, timeout=self.target.timeout, metadata=self.target.metadata()
            )
        except grpc.RpcError as exc:
            raise _explain(exc, self.target.address) from None

    # -- conversations ----------------------------------------------------------------
    async def list_contexts(self, prefix: str, token: str, size: int = 50):
        req = pb.ListContextsRequest(
            page_size=size, page_token=token, id_prefix=prefix, include_archived=True
        )
        return await self._call("contexts", "ListContexts", req)

    async def transcript(self, cid: str, after: int, before_id: str) -> TranscriptPage:
        """The PAGE live messages before the last ``after`` ones (a tail read:
        what it costs is what it returns, however long the conversation)."""
        req = pb.GetContextRequest(
            context_id=cid,
            view=pb.CONTEXT_VIEW_FULL,
            last_n=after + PAGE,
            page_size=PAGE + 64,
        )
        resp = await self._call("contexts", "GetContext", req)
        context = pb.Context()
        context.CopyFrom(resp.context)
        messages = list(resp.context.messages)
        token = resp.next_page_token
        # A tail never opens inside a tool round, so it may start a little
        # earlier: read on until the newer page's first message.
        while before_id and token and all(m.id != before_id for m in messages):
            req = pb.GetContextRequest(
                context_id=cid, view=pb.CONTEXT_VIEW_FULL, page_size=PAGE + 64, page_token=token
            )
            more = await self._call("contexts", "GetContext", req)
            messages.extend(more.context.messages)
            token = more.next_page_token
        if before_id:
            ids = [m.id for m in messages]
            if before_id in ids:
                messages = messages[: ids.index(before_id)]
        del context.messages[:]
        total = resp.info.message_count
        shown_after = after + len(messages)
        return TranscriptPage(
            resp.info, context, messages, shown_after, max(0, total - shown_after)
        )

    async def from_start(self, cid: str, token: str, offset: int) -> TranscriptPage:
        """A page read forward from the first live message (the sidecar's own
        page tokens): the start of a long conversation in one read."""
        req = pb.GetContextRequest(
            context_id=cid, view=pb.CONTEXT_VIEW_FULL, page_size=PAGE, page_token=token
        )
        resp = await self._call("contexts", "GetContext", req)
        context = pb.Context()
        context.CopyFrom(resp.context)
        messages = list(resp.context.messages)
        del context.messages[:]
        total = resp.info.message_count
        return TranscriptPage(
            resp.info,
            context,
            messages,
            max(0, total - offset),
            min(offset, total),
            resp.next_page_token,
        )

    async def record(self, cid: str) -> tuple[pb.ContextInfo, pb.Context]:
        """The listing view and the record (summary, plan, compactions) with
        one message: a read whose cost does not grow with the transcript."""
        req = pb.GetContextRequest(context_id=cid, view=pb.CONTEXT_VIEW_FULL, last_n=1, page_size=1)
        resp = await self._call("contexts", "GetContext", req)
        return resp.info, resp.context

    async def slice(self, cid: str, fmt: str, last_n: int, at_version: int = 0):
        req = pb.GetContextRequest(
            context_id=cid,
            view=pb.CONTEXT_VIEW_SLICE,
            format=FORMATS.get(fmt, pb.MESSAGE_FORMAT_CTXD),
            last_n=last_n,
            page_size=max(last_n, 1) + 64 if last_n else 1000,
            at_version=at_version,
        )
        return await self._call("contexts", "GetContext", req)

    async def at_version(self, cid: str, version: int) -> pb.GetContextResponse:
        """The conversation as it was at ``version``: its record and last PAGE messages."""
        req = pb.GetContextRequest(
            context_id=cid,
            view=pb.CONTEXT_VIEW_FULL,
            last_n=PAGE,
            page_size=PAGE + 64,
            at_version=version,
        )
        return await self._call("contexts", "GetContext", req)

    async def summary_block(self, cid: str) -> str:
        """The summary as the model reads it (its verbatim ledger included)."""
        req = pb.GetContextRequest(
            context_id=cid, view=pb.CONTEXT_VIEW_SLICE, last_n=1, page_size=4
        )
        resp = await self._call("contexts", "GetContext", req)
        return next((m.system.text for m in resp.slice if m.id == "summary"), "")

    async def expand(self, cid: str, compaction_id: str, token: str = ""):
        req = pb.ExpandCompactionRequest(
            context_id=cid, compaction_id=compaction_id, page_size=200, page_token=token
        )
        return await self._call("contexts", "ExpandCompaction", req)

    async def versions(self, cid: str, token: str = "", size: int = 200):
        """ListVersions, or None when this sidecar keeps no versions."""
        req = pb.ListVersionsRequest(context_id=cid, page_size=size, page_token=token)
        try:
            return await self._call("contexts", "ListVersions", req)
        except Unavailable as exc:
            if "UNIMPLEMENTED" in exc.detail:
                return None
            raise

    # -- memory -----------------------------------------------------------------------
    async def memory(self, prefix: str, token: str, size: int = 50):
        req = mpb.ListRequest(prefix=prefix, limit=size, page_token=token, include_values=True)
        return await self._call("memory", "List", req)
