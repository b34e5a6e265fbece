"""The two store hooks, written once for every store plugin.

A store plugin serves one URI scheme: it names the scheme in
``ctxd_store_schemes`` and opens a store in ``ctxd_open_store`` when asked for
that scheme (``None`` otherwise, so other plugins may answer). Only the
opening differs between plugins, so a plugin module writes just that, with
its URI options declared as a pydantic model::

    from ctxd_sidecar.plugin import StoreOptions, store_hooks

    class DirOptions(StoreOptions):
        locking: bool = True

    def open_dir(uri: str, options: DirOptions) -> DirStore:
        ...

    ctxd_store_schemes, ctxd_open_store = store_hooks("dir", open_dir, DirOptions)

An unknown or malformed option is refused before the factory runs, in one
line naming the option (``ctxd serve`` exits 2 with it). The result is also
an object carrying both hooks, so it can be registered as a plugin itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ctxd_sidecar.config import problems
from ctxd_sidecar.plugin.spec import hookimpl
from ctxd_sidecar.plugin.store import Store


class StoreOptions(BaseModel):
    """Base of a store plugin's URI options: every field has a default,
    unknown options are refused, values arrive as strings and are converted
    (``true``/``false``, numbers) by pydantic."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Opts = TypeVar("Opts", bound=StoreOptions)

#: Opens the store a URI names: ``factory(uri, options)``. It may raise
#: ``ValueError`` with an operator-facing message for a malformed URI.
StoreFactory = Callable[[str, Opts], Store]


class StoreHooks:
    """``ctxd_store_schemes`` and ``ctxd_open_store`` for one scheme: a plugin
    object pluggy can register, that also unpacks into a module's two hooks."""

    def __init__(
        self,
        ctxd_store_schemes: Callable[[], list[str]],
        ctxd_open_store: Callable[[str, str, Mapping[str, str]], Store | None],
    ) -> None:
        # Instance attributes, not properties: pluggy finds hooks statically.
        self.ctxd_store_schemes = ctxd_store_schemes
        self.ctxd_open_store = ctxd_open_store

    def __iter__(self) -> Iterator[Callable[..., object]]:
        return iter((self.ctxd_store_schemes, self.ctxd_open_store))


def store_hooks(
    scheme: str, factory: StoreFactory, options: type[StoreOptions] = StoreOptions
) -> StoreHooks:
    """Both store hook implementations for a plugin serving ``scheme``, whose
    URI options are ``options`` (the base class: none)."""
    served = scheme.lower()  # the sidecar asks with the lower-cased scheme

    @hookimpl
    def ctxd_store_schemes() -> list[str]:
        return [served]

    @hookimpl
    def ctxd_open_store(scheme: str, uri: str, options: Mapping[str, str]) -> Store | None:
        if scheme != served:
            return None
        return factory(uri, parse_options(served, schema, options))

    schema = options
    ctxd_store_schemes.__doc__ = f"Serves the {served!r} URI scheme."
    ctxd_open_store.__doc__ = f"Opens a {served}:// store; None for other schemes."
    return StoreHooks(ctxd_store_schemes, ctxd_open_store)


def parse_options(scheme: str, schema: type[Opts], raw: Mapping[str, str]) -> Opts:
    """``raw`` (the URI query) as ``schema``; ValueError in one line naming
    the first bad option."""
    try:
        return schema.model_validate(dict(raw))
    except ValidationError as exc:
        raise ValueError(_one_line(scheme, schema, exc.errors()[0])) from None


def _one_line(scheme: str, schema: type[StoreOptions], error: Mapping[str, Any]) -> str:
    name = ".".join(str(p) for p in error.get("loc", ())) or "?"
    if error.get("type") == "extra_forbidden":
        # as the URI spells them: a field's alias where it has one
        known = ", ".join(sorted(f.alias or n for n, f in schema.model_fields.items())) or "none"
        return f"unknown {scheme} store option {name!r} (known options: {known})"
    return f"{scheme} store option {problems.describe(error, name, schema)}"
