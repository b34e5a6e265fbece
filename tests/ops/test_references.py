"""What the prose names exists: every ctxd module, class or function a
docstring, comment or page names by import path (``ctxd_sidecar.core.storage``,
``ctxd_sidecar.plugin.store_hooks``), and every source file it names by path
(``sidecar/ctxd_sidecar/plugin/store.py``, ``ctxd_sidecar/plugin/``,
``server/composition.py`` in the architecture page).

Read: the hand-written sources of the server, the built-ins and the Python
client, and the docs (``docs/``, README.md, the clients' and examples'
READMEs). A module moved or renamed without its mentions is caught here
instead of by the next reader. The contexts package's own module map is
held to name every module of the package."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
if str(CLIENT) not in sys.path:  # the suite's venv holds the server only: import from source
    sys.path.insert(0, str(CLIENT))

PACKAGES = {
    "ctxd_sidecar": ROOT / "sidecar" / "ctxd_sidecar",
    "ctxd_plugins": ROOT / "plugins" / "ctxd_plugins",
    "ctxd_client": CLIENT / "ctxd_client",
}
#: ``ctxd_sidecar.core.storage.Storage``; not ``.pyi``/``.py`` file endings.
DOTTED = re.compile(r"(?<![\w/.])((?:ctxd_sidecar|ctxd_plugins|ctxd_client)(?:\.[A-Za-z_]\w*)+)")
#: a path from the project root, or from a package's own folder.
ROOTED = re.compile(
    r"(?<![\w/.-])((?:sidecar|plugins|clients|examples)/[\w./-]*[\w/]"
    r"|(?:ctxd_sidecar|ctxd_plugins|ctxd_client)/[\w./-]*[\w/])"
)
#: ``server/app.py`` and the like: paths inside ctxd_sidecar, in backquotes.
INNER = re.compile(r"`((?:server|core|config|admin|testing)/[\w./-]*[\w/])`")


def hand_written() -> list[Path]:
    return [
        p
        for package in PACKAGES.values()
        for p in sorted(package.rglob("*.py"))
        if not {"api", "_api"} & set(p.relative_to(package).parts)
    ]


def pages() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted(ROOT.glob("docs/**/*.md")),
        *sorted(ROOT.glob("clients/*/README.md")),
        *sorted(ROOT.glob("examples/**/README.md")),
    ]


def prose(path: Path) -> str:
    """A page whole; of a module its docstrings and comments only (its code
    is checked by running it)."""
    text = path.read_text()
    if path.suffix != ".py":
        return text
    tree = ast.parse(text)
    parts = [
        ast.get_docstring(n, clean=False) or ""
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    parts += [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]
    parts += [  # `#:` attribute docs sit in comments; string constants after them
        n.value.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
        if isinstance(n.value.value, str)
    ]
    return "\n".join(parts)


def resolves(dotted: str) -> bool:
    """The longest importable module prefix, then attributes for the rest."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def exists(path: str) -> bool:
    top = path.split("/", 1)[0]
    base = PACKAGES[top].parent if top in PACKAGES else ROOT
    return (base / path).exists()


def references(texts: dict[Path, str]) -> dict[str, set[tuple[str, str]]]:
    found: dict[str, set[tuple[str, str]]] = {"dotted": set(), "path": set()}
    for path, text in texts.items():
        where = str(path.relative_to(ROOT))
        found["dotted"] |= {(where, m) for m in DOTTED.findall(text)}
        found["path"] |= {(where, m) for m in ROOTED.findall(text)}
        found["path"] |= {(where, "ctxd_sidecar/" + m) for m in INNER.findall(text)}
    return found


@pytest.fixture(scope="module")
def named() -> dict[str, set[tuple[str, str]]]:
    return references({p: prose(p) for p in [*hand_written(), *pages()]})


def test_every_named_module_and_name_imports(named):
    broken = sorted((where, ref) for where, ref in named["dotted"] if not resolves(ref))
    assert not broken, "\n".join(f"{w}: {r}" for w, r in broken)


def test_every_named_source_path_exists(named):
    broken = sorted((where, ref) for where, ref in named["path"] if not exists(ref))
    assert not broken, "\n".join(f"{w}: {r}" for w, r in broken)


def test_no_prose_cites_a_document_the_repository_lacks():
    """The specification the code was written from is not part of the
    repository: a reference to its sections leads a reader nowhere."""
    if list(ROOT.glob("SPEC*")) or list(ROOT.glob("docs/SPEC*")):
        pytest.skip("the repository has a SPEC")
    cites = re.compile(r"\bSPEC\b(?: ?§| section| table|\s*\d)|\bthe SPEC\b")
    found = sorted(
        {
            f"{p.relative_to(ROOT)}: {m.group(0)}"
            for p in [*hand_written(), *pages()]
            for m in cites.finditer(prose(p))
        }
    )
    assert not found, "\n".join(found)


def test_the_contexts_module_map_names_every_module():
    from ctxd_sidecar.core import contexts

    package = PACKAGES["ctxd_sidecar"] / "core" / "contexts"
    listed = set(re.findall(r":mod:`\.(\w+)`", contexts.__doc__))
    modules = {p.stem for p in package.glob("*.py")} - {"__init__"}
    assert modules - listed == set(), "missing from the module map"
    assert listed - modules == set(), "in the module map, not in the package"


def test_the_checks_read_references():
    # A pattern that stopped matching would pass everything: make sure each reads some.
    texts = {
        ROOT / "x.md": "`ctxd_sidecar.plugin.store.Gone` and sidecar/ctxd_sidecar/gone.py, "
        "`server/gone.py`, ctxd_sidecar/plugin/spec.py."
    }
    found = references(texts)
    assert {r for _, r in found["dotted"]} == {"ctxd_sidecar.plugin.store.Gone"}
    assert {r for _, r in found["path"]} == {
        "sidecar/ctxd_sidecar/gone.py",
        "ctxd_sidecar/server/gone.py",
        "ctxd_sidecar/plugin/spec.py",
    }
    assert not resolves("ctxd_sidecar.plugin.store.Gone") and resolves(
        "ctxd_sidecar.plugin.store.Store"
    )
    assert not exists("ctxd_sidecar/server/gone.py") and exists("ctxd_sidecar/plugin/spec.py")
