"""Loading the configuration: layers, plugin tables, one-line errors.

Each layer (the TOML file, the ``CTXD_*`` environment, flags) becomes a
pydantic-settings source; pydantic-settings merges them by precedence and
pydantic validates the result against :class:`~ctxd_sidecar.config.Config`
extended with the plugins' tables. Environment names are matched exactly
against the known settings, because ``_`` both separates a table from its key
and appears inside key names (``CTXD_MEMORY_MAX_KEYS``).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_settings import PydanticBaseSettingsSource

from ctxd_sidecar.config import Config, ConfigError, ConfigTable, Table, dotted_to_nested, problems

if TYPE_CHECKING:
    import pluggy

Path = tuple[str, ...]

#: ``CTXD_*`` variables that are not server settings: the config file's path,
#: test hooks (ctxd_sidecar.core.faults) and the admin client's connection
#: (ctxd_sidecar.admin), which may share the server container's environment.
NOT_SETTINGS = frozenset(
    {
        "CTXD_CONFIG",
        "CTXD_CRASH_POINT",
        "CTXD_INDEX_PAGE_MAX",
        "CTXD_ADDRESS",
        "CTXD_TOKEN",
        "CTXD_TOKEN_FILE",
        "CTXD_TLS_CA_FILE",
        "CTXD_TLS_CLIENT_CERT_FILE",
        "CTXD_TLS_CLIENT_KEY_FILE",
        "CTXD_TLS_SERVER_NAME",
    }
)


class Layer(PydanticBaseSettingsSource):
    """One layer of settings, already nested, as a pydantic-settings source;
    it remembers where each value came from for error messages."""

    def __init__(self, settings_cls: type[Config], data: dict[str, Any], label: str) -> None:
        super().__init__(settings_cls)
        self.data = data
        self.label = label
        #: Per-setting origin where the label is not precise enough.
        self.origins: dict[Path, str] = {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.data

    def has(self, path: Path) -> bool:
        return _get(self.data, path) is not _MISSING

    def where(self, path: Path) -> str:
        return self.origins.get(path, self.label)


def load_config(
    *,
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    plugins: pluggy.PluginManager | None = None,
) -> Config:
    """Build the effective config. ``overrides`` are dotted names from flags;
    ``plugins`` supplies plugin tables and checks (default: every built-in
    and installed plugin). :class:`ConfigError` (a ValueError) on a bad one."""
    env = os.environ if env is None else env
    overrides = overrides or {}
    if plugins is None:
        from ctxd_sidecar.plugin.manager import plugin_manager

        plugins = plugin_manager()
    notes: list[str] = []
    tables = plugin_tables(plugins, notes)
    cls = settings_class(tables)
    layers = [Layer(cls, dotted_to_nested(overrides), "on the command line")]
    layers.append(_env_layer(cls, env, notes))
    path = config_file or env.get("CTXD_CONFIG")
    if path:
        layers.append(Layer(cls, _read_toml(path), f"in {path}"))
    try:
        cfg = cls(_build_sources=(tuple(layers), {}))
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, cls, layers)) from None
    cfg._warnings.extend(notes)
    _check(cfg, plugins)
    return cfg


def plugin_tables(pm: pluggy.PluginManager, notes: list[str]) -> dict[str, ConfigTable]:
    """Every plugin's tables by name; a later-registered plugin overrides an
    earlier one's table (the rule in :mod:`ctxd_sidecar.plugin.manager`), with a note."""
    from ctxd_sidecar.plugin.manager import each_result

    out: dict[str, ConfigTable] = {}
    owners: dict[str, str] = {}
    for owner, declared in each_result(pm, "ctxd_config_tables"):
        for table in declared or ():
            try:
                table.model()
            except ValidationError:
                raise ConfigError(
                    f"plugin {owner}: every key of table {table.name!r} needs a default"
                ) from None
            if table.name in out:
                notes.append(
                    f"config table {table.name!r} of {owners[table.name]} is overridden by {owner}"
                )
            out[table.name], owners[table.name] = table, owner
    return out


_CLASSES: dict[tuple[tuple[str, type[BaseModel]], ...], type[Config]] = {}


def settings_class(tables: Mapping[str, ConfigTable]) -> type[Config]:
    """:class:`Config` with each plugin table as a (nested) field of its own."""
    key = tuple(sorted((name, t.model) for name, t in tables.items()))
    if key in _CLASSES:
        return _CLASSES[key]
    tree: dict[str, Any] = {}
    for name, _ in key:
        *parents, leaf = name.split(".")
        if name.split(".")[0] in Config.model_fields:
            raise ConfigError(f"plugin table {name!r} clashes with a core setting")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"plugin table {name!r} is inside another plugin's table")
        if leaf in node:
            raise ConfigError(f"plugin table {name!r} clashes with another plugin's table")
        node[leaf] = tables[name].model
    cls = create_model("Config", __base__=Config, __module__=Config.__module__, **_fields(tree))
    _CLASSES[key] = cls
    return cls


def _fields(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, sub in tree.items():
        if isinstance(sub, dict):
            sub = create_model(f"{prefix}{key}", __base__=Table, **_fields(sub, f"{prefix}{key}."))
        out[key] = (sub, Field(default_factory=sub))
    return out


def leaf_paths(model: type[BaseModel], prefix: Path = ()) -> list[Path]:
    """Every setting of ``model`` as a path of names."""
    out: list[Path] = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(leaf_paths(ann, (*prefix, name)))
        else:
            out.append((*prefix, name))
    return out


def env_name(path: Path) -> str:
    return "CTXD_" + "_".join(path).upper()


def _env_layer(cls: type[Config], env: Mapping[str, str], notes: list[str]) -> Layer:
    known = {env_name(p): p for p in leaf_paths(cls)}
    layer = Layer(cls, {}, "in the environment")
    unknown = []
    for var, value in env.items():
        if not var.startswith("CTXD_") or var in NOT_SETTINGS:
            continue
        path = known.get(var)
        if path is None:
            unknown.append(var)
            continue
        _put(layer.data, path, value)
        layer.origins[path] = f"from {var}"
    if unknown:
        notes.append(f"ignoring unknown environment variables: {', '.join(sorted(unknown))}")
    return layer


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _check(cfg: Config, pm: pluggy.PluginManager) -> None:
    """Checks that need more than one table, or files: the prompt template,
    then every plugin's ``ctxd_check_config``."""
    from ctxd_sidecar.core.prompt.template import load_template
    from ctxd_sidecar.plugin.manager import each_result

    try:
        if cfg.prompt.template_file:
            load_template(cfg.prompt.template_file)
        for _ in each_result(pm, "ctxd_check_config", config=cfg):
            pass
    except ValueError as exc:
        raise ConfigError(" ".join(str(exc).split())) from None


# -- one-line errors --------------------------------------------------------------------------


def _one_line(exc: ValidationError, cls: type[Config], layers: list[Layer]) -> str:
    # An unknown key first: it is usually a typo that explains the rest.
    errors = sorted(exc.errors(include_url=False), key=lambda e: e["type"] != "extra_forbidden")
    text = _describe(errors[0], cls, layers)
    if len(errors) > 1:
        more = len(errors) - 1
        text += f" (and {more} more problem{'s' if more > 1 else ''})"
    return " ".join(text.split())


def _describe(error: Any, cls: type[Config], layers: list[Layer]) -> str:
    path = tuple(str(p) for p in error["loc"])
    name = ".".join(path)
    layer = next((la for la in layers if la.has(path)), None)
    where = layer.where(path) if layer is not None else ""
    if error["type"] == "extra_forbidden":
        return f"unknown setting {name!r} {where}".strip()
    text = problems.describe(error, name, cls)
    if layer is not None and not isinstance(_get(layer.data, path), dict):
        text += f" ({where})"
    return text


# -- nested dicts -----------------------------------------------------------------------------

_MISSING = object()


def _get(data: Mapping[str, Any], path: Path) -> Any:
    node: Any = data
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _put(data: dict[str, Any], path: Path, value: Any) -> None:
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{'.'.join(path)}: {part} is a setting, not a table")
        node = child
    node[path[-1]] = value


def _pop(data: dict[str, Any], path: Path) -> Any:
    parents = [data]
    for part in path[:-1]:
        parents.append(parents[-1][part])
    value = parents[-1].pop(path[-1])
    for node, part in zip(reversed(parents[:-1]), reversed(path[:-1]), strict=True):
        if not node[part]:
            del node[part]
    return value
