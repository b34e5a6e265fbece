"""The Python client's verbs keep one meaning each.

Every verb of ``Client`` and ``AsyncClient`` (``_base._Verbs``) is a typed,
documented signature whose call is its op builder's (``_ops``,
``_agent_ops``), given the same arguments. The signature is what callers,
their editors and type checkers read; the builder's is what the request is
made from. They are held to agree here, so a keyword added, renamed or given
another default on one side only is caught: the same positional parameters,
the same keywords with the same defaults, and ``timeout`` last."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "python"
if str(PACKAGE) not in sys.path:  # the suite's venv holds the server only: import from source
    sys.path.insert(0, str(PACKAGE))

from ctxd_client import AsyncClient, Client, _agent_ops, _base, _history_ops, _ops  # noqa: E402

VERBS = sorted(
    name
    for cls in (_base._Verbs, *_base._Verbs.__bases__)
    for name, fn in vars(cls).items()
    if callable(fn) and not name.startswith("_")
)


def shape(params) -> tuple[list[tuple[str, object]], dict[str, object]]:
    """(positional parameters with defaults, keyword-only ones with defaults)."""
    positional, keywords = [], {}
    for p in params:
        if p.kind is p.KEYWORD_ONLY:
            keywords[p.name] = p.default
        elif p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional.append((p.name, p.default))
    return positional, keywords


def builder_shape(builder) -> tuple[list[tuple[str, object]], dict[str, object]]:
    params = list(inspect.signature(builder).parameters.values())
    positional, keywords = shape(params)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        # ``**options`` are AppendTurn's: those of the request builder
        _, more = shape(inspect.signature(_ops._turn_request).parameters.values())
        keywords = {**more, **keywords}
    return positional, keywords


@pytest.mark.parametrize("name", VERBS)
def test_a_verb_and_its_op_builder_take_the_same_arguments(name):
    verb = getattr(_base._Verbs, name)
    params = list(inspect.signature(verb).parameters.values())
    assert params[0].name == "self" and params[-1].name == "timeout"
    assert params[-1].kind is params[-1].KEYWORD_ONLY and params[-1].default is None
    assert shape(params[1:-1]) == builder_shape(verb.build)
    assert verb.__wrapped__.__annotations__["return"] != "Any"  # typed for callers


def test_every_op_builder_is_a_verb():
    built = {getattr(_base._Verbs, name).build for name in VERBS}
    for module in (_ops, _agent_ops, _history_ops):
        for name, fn in vars(module).items():
            if inspect.isgeneratorfunction(fn) and not name.startswith("_"):
                assert fn in built, f"{module.__name__}.{name} has no verb"
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
        assert cls.memory_list.__doc__.startswith("Every live record under ``prefix``")
