"""ADK's session-service test file of any ADK version, run against CtxdSessionService.

Set ``CTXD_ADK_SESSION_TESTS`` to the path of google/adk-python's
``tests/unittests/sessions/test_session_service.py`` (the version matching
the installed google-adk; not vendored here). Every test of that file that
takes its ``session_service`` fixture runs over the services the file names
(ADK's own: the controls, in the same run) and over
:class:`CtxdSessionService` on a real sidecar (LMDB); the file's other tests
(about one ADK service's internals) run as they are. Skipped without the
variable: ctxd's tree carries no copy of ADK's code.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("google.adk")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from ctxd_client.integrations.adk import CtxdSessionService  # noqa: E402

PATH = os.environ.get("CTXD_ADK_SESSION_TESTS", "")
pytestmark = pytest.mark.skipif(not PATH, reason="set CTXD_ADK_SESSION_TESTS to ADK's test file")


def _load():
    spec = importlib.util.spec_from_file_location("adk_upstream_session_tests", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


UPSTREAM = _load() if PATH else None
TESTS = sorted(
    n
    for n, f in (vars(UPSTREAM) if UPSTREAM else {}).items()
    if n.startswith("test_") and inspect.iscoroutinefunction(f)
)
WITH_SERVICE = [
    n for n in TESTS if "session_service" in inspect.signature(getattr(UPSTREAM, n)).parameters
]
OTHERS = [n for n in TESTS if n not in WITH_SERVICE]
KINDS = [k.name for k in UPSTREAM.SessionServiceType] + ["CTXD"] if UPSTREAM else []


@pytest.fixture(scope="module")
def address(start_module_sidecar) -> str:
    return start_module_sidecar("lmdb", contexts__auto_compact=False).address


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", WITH_SERVICE)
async def test_upstream_with_service(name, kind, address, tmp_path):
    if kind == "CTXD":
        tag = uuid.uuid4().hex[:8]
        service = CtxdSessionService(address, prefix=f"f{tag}.", memory_prefix=f"f{tag}/")
    else:
        service = UPSTREAM.get_session_service(UPSTREAM.SessionServiceType[kind], tmp_path)
    light_copy = kind == "IN_MEMORY_WITH_LIGHT_COPY_ENABLED"
    if light_copy:  # what the file's own fixture does for this kind
        UPSTREAM.override_feature_enabled(
            UPSTREAM.FeatureName.IN_MEMORY_SESSION_SERVICE_LIGHT_COPY, True
        )
    test = getattr(UPSTREAM, name)
    kwargs = {"session_service": service}
    if "tmp_path" in inspect.signature(test).parameters:
        kwargs["tmp_path"] = tmp_path
    try:
        await test(**kwargs)
    finally:
        if light_copy:
            UPSTREAM.override_feature_enabled(
                UPSTREAM.FeatureName.IN_MEMORY_SESSION_SERVICE_LIGHT_COPY, False
            )
        close = getattr(service, "close", None)
        if close is not None:
            await close()


@pytest.mark.parametrize("name", OTHERS)
async def test_upstream_other(name, tmp_path, monkeypatch):
    test = getattr(UPSTREAM, name)
    params = inspect.signature(test).parameters
    kwargs = {
        k: v for k, v in (("tmp_path", tmp_path), ("monkeypatch", monkeypatch)) if k in params
    }
    await test(**kwargs)
