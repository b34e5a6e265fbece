"""LangGraph's own store test files of any version, run against CtxdStore.

Set ``CTXD_LANGGRAPH_STORE_TESTS`` to the paths (joined by ``os.pathsep``) of
langchain-ai/langgraph's ``libs/checkpoint/tests/test_store.py`` and/or
``libs/checkpoint-sqlite/tests/test_store.py`` / ``test_async_store.py``, of
the version matching the installed langgraph-checkpoint (not vendored here;
each file's ``tests.*`` imports resolve in its own folder; the first needs
pytest-mock, the others langgraph-checkpoint-sqlite). Each test that drives a
store (a ``store`` fixture, ``InMemoryStore(...)``, or ``SqliteStore`` /
``AsyncSqliteStore.from_conn_string``) runs twice in the same run: on the
file's own store (UPSTREAM, the control) and on :class:`CtxdStore` over a
real sidecar, the file's store names swapped for ctxd's (CTXD). A store
opened with ``index=`` (semantic search) gets it on ctxd too: the file's own
fake embeddings run in the client and the sidecar ranks; SQLite-only tests
are listed in NOT_APPLICABLE with theirs. Tests taking no store run once, as
they are. A parametrized test runs with the first value of each parameter.
Skipped without the variable: ctxd's tree carries no copy of LangGraph's code.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import sys
import types
import uuid
from pathlib import Path

import pytest

pytest.importorskip("langgraph.store.sqlite")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))

from langgraph.store.sqlite import AsyncSqliteStore, SqliteStore  # noqa: E402

from ctxd_client.integrations.langgraph import CtxdStore  # noqa: E402

PATHS = [p for p in os.environ.get("CTXD_LANGGRAPH_STORE_TESTS", "").split(os.pathsep) if p]
pytestmark = pytest.mark.skipif(
    not PATHS, reason="set CTXD_LANGGRAPH_STORE_TESTS to LangGraph's store test file(s)"
)
NO_EXTENSIONS = "control: this Python's sqlite3 cannot load extensions (sqlite-vec)"
NOT_APPLICABLE = {
    # SqliteStore builds SQL from filter keys and refuses unsafe ones; CtxdStore
    # filters on the client with no SQL, so such a key is just a missing field.
    "test_sql_injection_vulnerability": "SQLite's filter-key check guards SQL ctxd never builds",
    # AsyncSqliteStore refuses its sync methods on the loop's thread; a CtxdStore
    # opened on an address serves both APIs (the sync one over its own Client).
    "test_no_running_loop": "AsyncSqliteStore's refusal of sync calls; CtxdStore serves both",
    # Reads SQLite's own tables (sqlite_master) through the store's connection.
    # (this file's only: the other files' tests of that name run)
    "checkpoint-sqlite/test_store.py::test_vector_store_initialization": (
        "checks SQLite's vector tables through store.conn"
    ),
}


def _load(path: str) -> types.ModuleType:
    """Loads one upstream file; its ``tests.*`` imports resolve to its own folder."""
    folder = Path(path).resolve().parent
    saved = {k: v for k, v in sys.modules.items() if k == "tests" or k.startswith("tests.")}
    for k in saved:
        del sys.modules[k]
    pkg = types.ModuleType("tests")
    pkg.__path__ = [str(folder)]
    sys.modules["tests"] = pkg
    try:
        spec = importlib.util.spec_from_file_location(f"tests.{Path(path).stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        for k in [k for k in sys.modules if k == "tests" or k.startswith("tests.")]:
            del sys.modules[k]
        sys.modules.update(saved)


MODULES = {f"{Path(p).resolve().parent.parent.name}/{Path(p).name}": _load(p) for p in PATHS}


def _tests(module) -> list[tuple[str, object]]:
    """(id, callable) of the module's test functions and test-class methods."""
    found = []
    for name, obj in vars(module).items():
        if name.startswith("test_") and inspect.isfunction(obj):
            found.append((name, obj))
        elif name.startswith("Test") and inspect.isclass(obj):
            for m, f in vars(obj).items():
                if m.startswith("test_") and inspect.isfunction(f):
                    found.append((f"{name}.{m}", getattr(obj(), m)))
    return found


def _params(test) -> set[str]:
    return set(inspect.signature(test).parameters)


def _drives_store(module, test) -> bool:
    source = inspect.getsource(test)
    return (
        "store" in _params(test)
        or "fake_embeddings" in _params(test)
        or any(n in source for n in ("from_conn_string", "create_vector_store", "InMemoryStore("))
    )


CASES = [(f, n, t) for f, m in MODULES.items() for n, t in _tests(m)]
WITH_STORE = [
    pytest.param(f, n, id=f"{f}::{n}") for f, n, t in CASES if _drives_store(MODULES[f], t)
]
OTHERS = [
    pytest.param(f, n, id=f"{f}::{n}") for f, n, t in CASES if not _drives_store(MODULES[f], t)
]


def _get(file: str, name: str):
    return dict(_tests(MODULES[file]))[name]


@pytest.fixture(scope="module")
def address(start_module_sidecar) -> str:
    return start_module_sidecar("lmdb", contexts__auto_compact=False).address


class _CtxdAsSqlite:
    """Stands for the file's SqliteStore/AsyncSqliteStore: opens a CtxdStore."""

    def __init__(self, address: str, opened: list) -> None:
        self.address, self.opened = address, opened

    def _open(self, index=None, ttl=None):
        store = CtxdStore(self.address, prefix=f"lg{uuid.uuid4().hex[:8]}", ttl=ttl, index=index)
        self.opened.append(store)
        return store

    def memory_class(self):
        """Stands for InMemoryStore: a CtxdStore built by the same call."""
        outer = self

        class Store(CtxdStore):
            def __init__(self, *, index=None, ttl=None, **_):
                prefix = f"lg{uuid.uuid4().hex[:8]}"
                super().__init__(outer.address, prefix=prefix, ttl=ttl, index=index)
                outer.opened.append(self)

        return Store

    def sync_class(self):
        outer = self

        class Store:
            @staticmethod
            @contextlib.contextmanager
            def from_conn_string(conn_string, *, index=None, ttl=None, **_):
                store = outer._open(index, ttl)
                store.setup = lambda: None
                yield store

        return Store

    def async_class(self):
        outer = self

        class Store:
            @staticmethod
            @contextlib.asynccontextmanager
            async def from_conn_string(conn_string, *, index=None, ttl=None, **_):
                store = outer._open(index, ttl)

                async def setup():
                    return None

                store.setup = setup
                yield store

        return Store


def _first_values(test) -> dict:
    """The first value of each ``pytest.mark.parametrize`` argument of ``test``."""
    out = {}
    for mark in getattr(test, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = mark.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        first = mark.args[1][0]
        first = getattr(first, "values", first)
        out.update(zip(names, first if len(names) > 1 else [first], strict=True))
    return out


async def _run(test, kwargs):
    result = test(**kwargs)
    if inspect.isawaitable(result):
        await result


@pytest.mark.parametrize("kind", ["UPSTREAM", "CTXD"])
@pytest.mark.parametrize(("file", "name"), WITH_STORE)
async def test_upstream_with_store(file, name, kind, address, monkeypatch, request):
    module, test = MODULES[file], _get(file, name)
    opened: list[CtxdStore] = []
    short = name.rsplit(".", 1)[-1]
    reason = NOT_APPLICABLE.get(f"{file}::{short}", NOT_APPLICABLE.get(short))
    if kind == "CTXD" and reason:
        pytest.skip(f"not applicable: {reason}")
    if kind == "CTXD":
        shim = _CtxdAsSqlite(address, opened)
        if hasattr(module, "SqliteStore"):
            monkeypatch.setattr(module, "SqliteStore", shim.sync_class())
        if hasattr(module, "InMemoryStore"):
            monkeypatch.setattr(module, "InMemoryStore", shim.memory_class())
        if hasattr(module, "AsyncSqliteStore"):
            monkeypatch.setattr(module, "AsyncSqliteStore", shim.async_class())
    params = _params(test)
    kwargs = {k: v for k, v in _first_values(test).items() if k in params}
    if "fake_embeddings" in params:
        kwargs["fake_embeddings"] = module.CharacterEmbeddings(dims=500)
    if "mocker" in params:
        kwargs["mocker"] = request.getfixturevalue("mocker")
    if "conn_string" in params:
        kwargs["conn_string"] = ":memory:"
    try:
        async with contextlib.AsyncExitStack() as stack:
            if "store" in params:
                if kind == "CTXD":
                    kwargs["store"] = shim._open()
                elif inspect.iscoroutinefunction(test):
                    kwargs["store"] = await stack.enter_async_context(
                        AsyncSqliteStore.from_conn_string(":memory:")
                    )
                    await kwargs["store"].setup()
                else:
                    kwargs["store"] = stack.enter_context(SqliteStore.from_conn_string(":memory:"))
                    kwargs["store"].setup()
            await _run(test, kwargs)
        assert kind != "CTXD" or opened, "the test ran on no CtxdStore (store not swapped)"
    except AttributeError as e:
        if kind == "UPSTREAM" and "enable_load_extension" in str(e):
            pytest.skip(NO_EXTENSIONS)
        raise
    finally:
        for store in opened:
            store.close()


@pytest.mark.parametrize(("file", "name"), OTHERS)
async def test_upstream_other(file, name, request):
    test = _get(file, name)
    await _run(test, {k: request.getfixturevalue(k) for k in _params(test)})
