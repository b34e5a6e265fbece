"""Configuration: defaults < config file < ``CTXD_*`` environment < flags.

The config file is TOML (``--config PATH`` or ``CTXD_CONFIG``). Top-level keys
configure the server; tables configure a part::

    listen = "127.0.0.1:50051"
    store = "lmdb:///var/lib/ctxd"

    [memory]
    max_value_bytes = 65536

Every setting also has an environment variable: ``CTXD_<KEY>`` for top-level
keys, ``CTXD_<TABLE>_<KEY>`` for table keys (``CTXD_MEMORY_MAX_VALUE_BYTES``),
and a flag ``--set table.key=value`` (common ones have their own flags).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class MemoryConfig:
    #: Largest value, in bytes of JSON text (a value exactly this size is accepted).
    max_value_bytes: int = 64 * 1024
    #: Most live keys per instance.
    max_keys: int = 10_000
    #: Most bytes of values per instance.
    max_total_bytes: int = 64 * 1024 * 1024
    #: Deepest JSON nesting accepted in a value.
    max_depth: int = 64
    #: Seconds between sweeps of expired records (0 disables the sweeper).
    sweep_interval: float = 60.0
    #: Route memory operations to an MCP server's tools instead of the store:
    #: a command line (stdio) or an http(s) URL; empty keeps the store.
    mcp_server: str = ""


@dataclass
class ContextsConfig:
    #: Most contexts kept in memory (least recently used are evicted).
    cache_max_contexts: int = 1_000
    #: Most bytes of transcript kept in memory across cached contexts.
    cache_max_bytes: int = 256 * 1024 * 1024
    #: Seconds a conversation may stay idle before it is closed (0: never).
    conversation_ttl: float = 30 * 24 * 3600.0
    #: What closing an idle conversation does: "delete" or "archive".
    on_expire: str = "archive"
    #: Window assumed when neither model_window nor a known model is given.
    default_model_window: int = 128_000
    #: Largest single message, in bytes of text/JSON.
    max_message_bytes: int = 1024 * 1024
    #: Most messages in one AppendTurn.
    max_turn_messages: int = 256
    #: Automatic compaction threshold as a fraction of the model window.
    compact_at: float = 0.7
    #: Run compaction automatically when the threshold is passed.
    auto_compact: bool = True
    #: Messages kept verbatim by compaction.
    keep_last: int = 12


@dataclass
class Config:
    #: gRPC address: host:port, or unix:PATH.
    listen: str = "127.0.0.1:50051"
    #: Store URI; the scheme picks the plugin.
    store: str = "lmdb://ctxd-data"
    #: First key segment in the store; lets unrelated deployments share one.
    prefix: str = "ctxd"
    #: The instance namespace this sidecar serves.
    instance: str = "default"
    #: Seconds in-flight calls get to finish on SIGTERM.
    grace_seconds: float = 10.0
    #: Seconds between store health probes; while the store fails them, the
    #: ctxd services report NOT_SERVING (the process itself stays SERVING).
    store_probe_interval: float = 5.0
    #: Prometheus metrics address (host:port); empty disables it.
    metrics_listen: str = ""
    #: File holding the bearer token callers must send (preferred over
    #: ``auth_token``); both empty disables auth.
    auth_token_file: str = ""
    #: The bearer token itself, for ``CTXD_AUTH_TOKEN``; never put it in a
    #: config file that others can read.
    auth_token: str = field(default="", repr=False)
    #: TLS certificate and key (PEM files); both empty means plaintext.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    #: CA bundle to verify client certificates (mTLS); empty: no client certs.
    tls_client_ca_file: str = ""
    log_level: str = "INFO"
    #: "json" (structured, one object per line) or "text".
    log_format: str = "json"
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    contexts: ContextsConfig = field(default_factory=ContextsConfig)

    def validate(self) -> None:
        """Raise ValueError naming the setting at fault."""
        if not 0 < self.contexts.compact_at <= 1:
            raise ValueError("contexts.compact_at must be in (0, 1]")
        if self.contexts.on_expire not in {"delete", "archive"}:
            raise ValueError('contexts.on_expire must be "delete" or "archive"')
        if self.log_format not in {"json", "text"}:
            raise ValueError('log_format must be "json" or "text"')
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file must be set together")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError("tls_client_ca_file needs tls_cert_file and tls_key_file")
        if not self.instance or "/" in self.instance or self.instance in {".", ".."}:
            raise ValueError("instance must be a non-empty name without '/'")
        for name, value in (
            ("memory.max_value_bytes", self.memory.max_value_bytes),
            ("memory.max_keys", self.memory.max_keys),
            ("memory.max_total_bytes", self.memory.max_total_bytes),
            ("memory.max_depth", self.memory.max_depth),
            ("contexts.cache_max_contexts", self.contexts.cache_max_contexts),
            ("contexts.default_model_window", self.contexts.default_model_window),
            ("contexts.keep_last", self.contexts.keep_last),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be positive")


def _coerce(kind: Any, raw: Any, name: str) -> Any:
    if isinstance(kind, str):  # postponed annotations
        kind = eval(kind, vars(typing) | vars(types))  # noqa: S307 - our own annotations
    if not isinstance(raw, str):
        if kind is float and isinstance(raw, int):
            return float(raw)
        if not isinstance(raw, kind) or (kind is int and isinstance(raw, bool)):
            raise ValueError(f"{name} must be {kind.__name__}")
        return raw
    try:
        if kind is bool:
            if raw.lower() in {"1", "true", "yes", "on"}:
                return True
            if raw.lower() in {"0", "false", "no", "off"}:
                return False
            raise ValueError
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a valid {kind.__name__}") from None


def _apply(target: Any, values: Mapping[str, Any], origin: str, path: str = "") -> None:
    fields = {f.name: f for f in dataclasses.fields(target)}
    for key, raw in values.items():
        name = f"{path}{key}"
        f = fields.get(key)
        if f is None:
            raise ValueError(f"unknown setting {name!r} in {origin}")
        current = getattr(target, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(raw, Mapping):
                raise ValueError(f"{name} in {origin} must be a table")
            _apply(current, raw, origin, f"{name}.")
        else:
            setattr(target, key, _coerce(f.type, raw, name))


def _env_values(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Config):
        default = getattr(Config(), f.name)
        if dataclasses.is_dataclass(default):
            for sub in dataclasses.fields(default):
                var = f"CTXD_{f.name}_{sub.name}".upper()
                if var in env:
                    out.setdefault(f.name, {})[sub.name] = env[var]
        else:
            var = f"CTXD_{f.name}".upper()
            if var in env:
                out[f.name] = env[var]
    return out


def dotted_to_nested(pairs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dotted, value in pairs.items():
        *tables, key = dotted.split(".")
        node = out
        for t in tables:
            node = node.setdefault(t, {})
        node[key] = value
    return out


def load(
    *,
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Build the effective config. ``overrides`` are dotted names from flags."""
    env = os.environ if env is None else env
    cfg = Config()
    path = config_file or env.get("CTXD_CONFIG")
    if path:
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ValueError(f"cannot read config file: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"config file is not valid TOML: {exc}") from None
        _apply(cfg, data, "the config file")
    _apply(cfg, _env_values(env), "the environment")
    if overrides:
        _apply(cfg, dotted_to_nested(overrides), "the command line")
    cfg.validate()
    return cfg
