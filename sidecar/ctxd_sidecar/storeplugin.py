"""The two store hooks, written once for every store plugin.

A store plugin serves one URI scheme: it names the scheme in
``ctxd_store_schemes`` and opens a store in ``ctxd_open_store`` when asked for
that scheme (``None`` otherwise, so other plugins may answer). Only the
opening differs between plugins, so a plugin module writes just that::

    from ctxd_sidecar.storeplugin import store_hooks

    def open_dir(uri: str, options: Mapping[str, str]) -> DirStore:
        ...

    ctxd_store_schemes, ctxd_open_store = store_hooks("dir", open_dir)

The result is also an object carrying both hooks, so it can be registered
as a plugin itself (``pm.register(hooks)`` or an entry point naming it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from ctxd_sidecar.hookspecs import hookimpl
from ctxd_sidecar.store import Store

#: Opens the store a URI names: ``factory(uri, options)``. It may raise
#: ``ValueError`` with an operator-facing message for a malformed URI.
StoreFactory = Callable[[str, Mapping[str, str]], Store]


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
    scheme: str, factory: StoreFactory, *, options: Iterable[str] | None = None
) -> StoreHooks:
    """Both store hook implementations for a plugin serving ``scheme``.

    ``options`` names every URI query option the store understands; any
    other is refused with a message naming it (a misspelt ``map_sise=`` must
    not be silently ignored). ``None`` leaves the check to the factory.
    """
    served = scheme.lower()  # the sidecar asks with the lower-cased scheme
    known = None if options is None else frozenset(options)

    @hookimpl
    def ctxd_store_schemes() -> list[str]:
        return [served]

    @hookimpl
    def ctxd_open_store(scheme: str, uri: str, options: Mapping[str, str]) -> Store | None:
        if scheme != served:
            return None
        if known is not None:
            unknown = sorted(set(options) - known)
            if unknown:
                listed = ", ".join(sorted(known)) or "none"
                raise ValueError(
                    f"unknown {served} store option {unknown[0]!r} (known options: {listed})"
                )
        return factory(uri, options)

    ctxd_store_schemes.__doc__ = f"Serves the {served!r} URI scheme."
    ctxd_open_store.__doc__ = f"Opens a {served}:// store; None for other schemes."
    return StoreHooks(ctxd_store_schemes, ctxd_open_store)
