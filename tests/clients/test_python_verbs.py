"""The Python client's verbs keep one meaning each.

Every verb of ``Client`` and ``AsyncClient`` (``_base._BaseClient``) is written
once, as its op builder: a typed, documented generator method that
``_ops.verb`` makes a client method. What callers, their editors and type
checkers read is that signature, ``timeout`` last, returning what the op
returns; the request is made from the same arguments. Checked here without
a sidecar: the signatures, and that every argument reaches its request."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "python"
if str(PACKAGE) not in sys.path:  # the suite's venv holds the server only: import from source
    sys.path.insert(0, str(PACKAGE))

from ctxd_client import AsyncClient, Client, _base  # noqa: E402

VERBS = sorted(
    name
    for cls in _base._BaseClient.__mro__
    for name, fn in vars(cls).items()
    if callable(fn) and not name.startswith("_")
)


@pytest.mark.parametrize("name", VERBS)
def test_a_verb_is_its_op_builder_with_the_call_timeout(name):
    verb = getattr(_base._BaseClient, name)
    assert inspect.isgeneratorfunction(verb.__wrapped__)
    signature = inspect.signature(verb)
    params = list(signature.parameters.values())
    assert params[0].name == "self" and params[-1].name == "timeout"
    assert params[-1].kind is params[-1].KEYWORD_ONLY and params[-1].default is None
    assert signature.return_annotation not in ("Any", inspect.Signature.empty)
    assert not signature.return_annotation.startswith("Op")  # what the caller gets
    assert verb.__annotations__["return"] == signature.return_annotation


def test_there_are_all_the_verbs():
    assert len(VERBS) >= 25


def test_both_clients_show_the_verbs_own_signatures():
    for cls in (Client, AsyncClient):
        signature = inspect.signature(cls.memory_list)
        assert list(signature.parameters) == [
            "self",
            "prefix",
            "include_values",
            "limit",
            "timeout",
        ]
        assert signature.return_annotation == "list[mpb.MemoryRecord]"
        assert cls.memory_list.__doc__.startswith("Every live record under ``prefix``")


APPEND = {
    "idempotency_key": "k-1",
    "expected_version": 3,
    "principal": "alice",
    "model": "m-1",
    "model_window": 4096,
    "task": "answer",
}


@pytest.mark.parametrize("name", ["append_turn", "turn"])
def test_every_append_keyword_reaches_the_request(name):
    extra = {"since_version": 1} if name == "turn" else {}
    op = getattr(Client, name).__wrapped__(None, "c", [{"user": {"text": "hi"}}], **APPEND, **extra)
    req = next(op).request
    assert {k: getattr(req, k) for k in APPEND} == APPEND
    assert [m.user.text for m in req.messages] == ["hi"]
