"""Fixtures of the browser tests: one real sidecar (LMDB) with the seeded
conversations, ``ctxd ui`` over it, and Debian's Chromium driven by
Playwright (launched by path; skipped where it is not installed)."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest

from ctxd_sidecar.api.ctxd.v1 import context_pb2_grpc, memory_pb2_grpc
from tests.conftest import _sidecar_factory, _stop_all
from tests.ui import support

CHROMIUM = os.environ.get("CTXD_TEST_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    started = []
    start = _sidecar_factory(started)
    directory = tmp_path_factory.mktemp("ui-sidecar")
    sc = start(f"lmdb://{directory}/store?map_size=512MiB", contexts__auto_compact=False)
    contexts = context_pb2_grpc.ContextServiceStub(sc.channel)
    support.seed_demo(contexts)
    support.seed_demo(contexts, "demo:hostile", extra=support.HOSTILE)
    support.seed_native(contexts)
    support.seed_big(contexts)
    support.seed_list(contexts)
    support.seed_memory(memory_pb2_grpc.MemoryServiceStub(sc.channel))
    yield sc
    _stop_all(started)


@pytest.fixture(scope="module")
def ui(seeded):
    proc = support.UiProcess("--address", seeded.address)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def browser():
    # Module-scoped: Playwright's sync API keeps an event loop running on this
    # thread until it stops, and a later test of this worker that runs one of
    # its own (asyncio.run, pytest-asyncio) would find it.
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


class Watched:
    """A page whose every request is recorded (and any leaving the loopback
    refused), and whose dialogs are recorded and dismissed."""

    def __init__(self, browser) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 860})
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("dialog", self._dialog)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _route(self, route) -> None:
        url = route.request.url
        self.requests.append(url)
        host = urlsplit(url).hostname
        if url.startswith("data:") or host in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            route.abort()

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def outside(self) -> list[str]:
        return [
            u
            for u in self.requests
            if not u.startswith("data:") and urlsplit(u).hostname not in ("127.0.0.1",)
        ]


@pytest.fixture
def watched(browser):
    w = Watched(browser)
    yield w
    w.context.close()
