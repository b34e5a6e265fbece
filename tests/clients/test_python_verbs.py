"""The Python client's verbs keep one signature each.

Every verb of ``Client`` and ``AsyncClient`` (``_base._Verbs``) is a typed
method that hands its arguments to an op builder (``_ops``, ``_agent_ops``):
the public signature is written there for type checkers and editors, and
the builder's is what the request is made from. They are held to agree here,
so a keyword added, renamed or given another default on one side only is
caught: same positional parameters, same keywords with the same defaults,
each passed on under its own name, and ``timeout`` last."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "python"
if str(PACKAGE) not in sys.path:  # the suite's venv holds the server only: import from source
    sys.path.insert(0, str(PACKAGE))

from ctxd_client import _agent_ops, _base, _ops  # noqa: E402

BUILDERS = {"ops": _ops, "agent_ops": _agent_ops}


def verbs() -> dict[str, ast.Call]:
    """Each public verb of ``_Verbs`` and the builder call it runs."""
    tree = ast.parse(inspect.getsource(_base))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_Verbs")
    found = {}
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and not fn.name.startswith("_"):
            (run,) = [
                n
                for n in ast.walk(fn)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "_run"
            ]
            found[fn.name] = run.args[0]
    return found


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


@pytest.mark.parametrize("name", sorted(verbs()))
def test_a_verb_and_its_op_builder_take_the_same_arguments(name):
    call = verbs()[name]
    builder = getattr(BUILDERS[call.func.value.id], call.func.attr)
    params = list(inspect.signature(getattr(_base._Verbs, name)).parameters.values())
    assert params[0].name == "self" and params[-1].name == "timeout"
    assert params[-1].kind is params[-1].KEYWORD_ONLY and params[-1].default is None
    assert shape(params[1:-1]) == builder_shape(builder)
    # each argument handed on under its own name, none dropped or swapped
    passed = [a.id for a in call.args if isinstance(a, ast.Name)]
    passed += [
        k.arg for k in call.keywords if isinstance(k.value, ast.Name) and k.arg == k.value.id
    ]
    assert len(passed) == len(call.args) + len(call.keywords)
    assert sorted(passed) == sorted(p.name for p in params[1:-1])


def test_every_op_builder_is_a_verb():
    used = {(c.func.value.id, c.func.attr) for c in verbs().values()}
    for alias, module in BUILDERS.items():
        for name, fn in vars(module).items():
            if inspect.isgeneratorfunction(fn) and not name.startswith("_"):
                assert (alias, name) in used, f"{module.__name__}.{name} has no verb"
    assert len(used) >= 25
