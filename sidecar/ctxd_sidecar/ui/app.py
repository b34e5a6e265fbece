"""The read-only web page: a Starlette app whose routes read the sidecar
(:mod:`.sidecar`) and render Jinja templates (autoescaped: a message's text
is always text). Only GET and HEAD are routed, so any other method answers
405; every asset ships in the package and the Content-Security-Policy
allows nothing from elsewhere."""

from __future__ import annotations

import asyncio
from importlib.resources import files

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ctxd_sidecar import __version__
from ctxd_sidecar.admin.connect import Target
from ctxd_sidecar.ui import render
from ctxd_sidecar.ui.sidecar import FORMATS, NotFound, Sidecar, Unavailable

HERE = files("ctxd_sidecar.ui")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
#: Slice messages the slice view shows (the tail of what the model is sent).
SLICE_TAIL = 200


def _templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(HERE / "templates"))
    t.env.globals.update(version=__version__, render=render)
    t.env.filters.update(
        when=render.when,
        num=render.num,
        ttl=render.ttl_left,
        pretty=render.pretty_json,
        size=render.size,
    )
    return t


def _int(request: Request, name: str, default: int = 0) -> int:
    raw = request.query_params.get(name, "")
    try:
        return max(0, int(raw)) if raw else default
    except ValueError:
        raise HTTPException(400, f"{name} must be a whole number") from None


class Pages:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.sidecar = Sidecar(target)
        self.templates = _templates()

    def page(self, request: Request, name: str, status: int = 200, **ctx) -> Response:
        ctx.setdefault("address", self.target.address)
        return self.templates.TemplateResponse(request, name, ctx, status_code=status)

    def _listing(self, request: Request, tab: str, prefix: str, resp, **ctx) -> Response:
        """One page of a filtered list: ``<tab>.html``, built on ``listing.html``."""
        return self.page(
            request,
            f"{tab}.html",
            prefix=prefix,
            next_token=resp.next_page_token,
            paged=bool(request.query_params.get("token")),
            tab=tab,
            **ctx,
        )

    async def conversations(self, request: Request) -> Response:
        prefix = request.query_params.get("prefix", "").strip()
        resp = await self.sidecar.list_contexts(prefix, request.query_params.get("token", ""))
        return self._listing(request, "conversations", prefix, resp, contexts=resp.contexts)

    async def _header(self, cid: str) -> dict:
        (info, context), versions = await asyncio.gather(
            self.sidecar.record(cid), self.sidecar.versions(cid, size=1)
        )
        return {"cid": cid, "info": info, "context": context, "has_versions": versions is not None}

    async def transcript(self, request: Request) -> Response:
        cid = request.path_params["cid"]
        q = request.query_params
        if q.get("from") == "start":
            read = self.sidecar.from_start(cid, q.get("token", ""), _int(request, "offset"))
        else:
            read = self.sidecar.transcript(cid, _int(request, "after"), q.get("before", ""))
        page, versions = await asyncio.gather(read, self.sidecar.versions(cid, size=1))
        return self.page(
            request,
            "transcript.html",
            cid=cid,
            info=page.info,
            context=page.context,
            items=render.pair_tool_results(page.messages),
            page=page,
            has_versions=versions is not None,
            tab="transcript",
        )

    async def slice(self, request: Request) -> Response:
        cid = request.path_params["cid"]
        fmt = request.query_params.get("format", "ctxd")
        if fmt not in FORMATS:
            raise HTTPException(400, f"format must be one of {', '.join(FORMATS)}")
        header, resp = await asyncio.gather(
            self._header(cid), self.sidecar.slice(cid, fmt, SLICE_TAIL)
        )
        return self.page(
            request,
            "slice.html",
            **header,
            fmt=fmt,
            formats=list(FORMATS),
            messages_json=render.pretty_json(resp.messages_json),
            system_json=render.pretty_json(resp.system_json) if resp.system_json else "",
            tail=SLICE_TAIL,
            tab="slice",
        )

    async def compactions(self, request: Request) -> Response:
        cid = request.path_params["cid"]
        header = await self._header(cid)
        records = list(reversed(header["context"].compactions))
        return self.page(request, "compactions.html", **header, records=records, tab="compactions")

    async def folded(self, request: Request) -> Response:
        cid, comp = request.path_params["cid"], request.path_params["comp"]
        resp = await self.sidecar.expand(cid, comp, request.query_params.get("token", ""))
        items = render.pair_tool_results(list(resp.messages))
        return self.page(
            request,
            "folded.html",
            cid=cid,
            comp=comp,
            items=items,
            next_token=resp.next_page_token,
        )

    async def summary(self, request: Request) -> Response:
        cid = request.path_params["cid"]
        header, block = await asyncio.gather(self._header(cid), self.sidecar.summary_block(cid))
        return self.page(request, "summary.html", **header, block=block, tab="summary")

    async def tokens(self, request: Request) -> Response:
        cid = request.path_params["cid"]
        header = await self._header(cid)
        versions = await self.sidecar.versions(cid) if header["has_versions"] else None
        records = list(header["context"].compactions)
        chart = render.token_chart(
            header["info"], records, list(versions.versions) if versions else []
        )
        return self.page(
            request, "tokens.html", **header, chart=chart, records=records, tab="tokens"
        )

    async def versions(self, request: Request) -> Response:
        cid = request.path_params["cid"]
        header = await self._header(cid)
        if not header["has_versions"]:
            raise HTTPException(404, "this sidecar keeps no versions (ListVersions is not served)")
        resp = await self.sidecar.versions(cid, request.query_params.get("token", ""))
        at = _int(request, "at")
        then = await self.sidecar.at_version(cid, at) if at else None
        return self.page(
            request,
            "versions.html",
            **header,
            versions=resp.versions,
            oldest=resp.oldest_kept,
            next_token=resp.next_page_token,
            at=at,
            then=then,
            then_items=render.pair_tool_results(list(then.context.messages)) if then else [],
            tab="versions",
        )

    async def memory(self, request: Request) -> Response:
        prefix = request.query_params.get("prefix", "")
        resp = await self.sidecar.memory(prefix, request.query_params.get("token", ""))
        return self._listing(
            request, "memory", prefix, resp, records=resp.records, now_ms=render.now_ms()
        )


def _errors(pages: Pages):
    async def unavailable(request: Request, exc: Unavailable) -> Response:
        return pages.page(request, "error.html", exc.status, title=exc.title, detail=exc.detail)

    async def not_found(request: Request, exc: NotFound) -> Response:
        cid = request.path_params.get("cid", "")
        detail = f"No conversation {cid!r} on this sidecar." if cid else str(exc)
        return pages.page(request, "error.html", 404, title="Not found", detail=detail)

    async def http(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 405:
            return HTMLResponse("This page is read-only.", 405, headers={"Allow": "GET, HEAD"})
        title = {404: "Not found", 400: "Bad request"}.get(exc.status_code, "Error")
        return pages.page(request, "error.html", exc.status_code, title=title, detail=exc.detail)

    return {Unavailable: unavailable, NotFound: not_found, HTTPException: http}


def create_app(target: Target) -> Starlette:
    pages = Pages(target)
    get = ["GET"]
    routes = [
        Route("/", pages.conversations, methods=get),
        Route("/memory", pages.memory, methods=get),
        Route("/c/{cid}", pages.transcript, methods=get),
        Route("/c/{cid}/slice", pages.slice, methods=get),
        Route("/c/{cid}/compactions", pages.compactions, methods=get),
        Route("/c/{cid}/compactions/{comp}", pages.folded, methods=get),
        Route("/c/{cid}/summary", pages.summary, methods=get),
        Route("/c/{cid}/tokens", pages.tokens, methods=get),
        Route("/c/{cid}/versions", pages.versions, methods=get),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(
        routes=routes, exception_handlers=_errors(pages), middleware=[Middleware(ReadOnly)]
    )
    app.state.pages = pages
    return app


class ReadOnly:
    """ASGI middleware: anything but GET and HEAD is 405 before routing, and
    every answer carries the security headers."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["method"] not in ("GET", "HEAD"):
            response = Response("This page is read-only.", 405, headers={"Allow": "GET, HEAD"})
            return await response(scope, receive, send)

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = CSP
                headers["X-Content-Type-Options"] = "nosniff"
                headers["Referrer-Policy"] = "no-referrer"
            await send(message)

        await self.app(scope, receive, send_with_headers)
