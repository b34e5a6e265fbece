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
    #: Most keys per instance (expired records count until swept; a write
    #: that would exceed a cap sweeps them first).
    max_keys: int = 10_000
    #: Most bytes of values (JSON text) per instance.
    max_total_bytes: int = 64 * 1024 * 1024
    #: Deepest JSON nesting accepted in a value (arrays and objects).
    max_depth: int = 64
    #: Seconds between sweeps of expired records (0 disables the sweeper;
    #: expired records are never returned either way).
    sweep_interval: float = 60.0
    #: Route memory operations to an MCP server's tools instead of the store:
    #: a command line (stdio) or an http(s) URL; empty keeps the store.
    mcp_server: str = ""
    #: Tool names for the MCP override, as OPERATION=TOOL pairs separated by
    #: commas (operations get, set, delete, list); unnamed ones default to
    #: memory_get, memory_set, memory_delete, memory_list.
    mcp_tools: str = ""
    #: Seconds to wait for the MCP memory server to answer one call (it gets
    #: at least 60 s to start).
    mcp_timeout: float = 10.0


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
    #: Versions between background checkpoints (segment + head) of a context.
    checkpoint_every: int = 64
    #: Bytes of new messages that trigger a checkpoint before checkpoint_every.
    checkpoint_bytes: int = 1024 * 1024
    #: Idempotency keys remembered per context (older ones are forgotten).
    idempotency_keys: int = 256
    #: Seconds between sweeps for idle conversations (0 disables the sweep).
    expire_interval: float = 3600.0
    #: What reads of a context reflect on a store shared by replicas (S3):
    #: "latest" (every write any replica acknowledged before the read, at the
    #: cost of one small request) or "cached" (this replica's copy, which may
    #: lag other replicas' writes). Stores used by one process ignore it.
    read_consistency: str = "latest"
    #: Seconds between checks for other replicas' changes of a watched context.
    watch_poll_interval: float = 0.5
    #: Seconds a deleted conversation's fence record stays on a shared store,
    #: so a replica holding an old copy can never append to it.
    fence_hold: float = 600.0

    def validate(self) -> None:
        for name in (
            "checkpoint_every",
            "checkpoint_bytes",
            "idempotency_keys",
            "max_message_bytes",
            "max_turn_messages",
            "cache_max_bytes",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"contexts.{name} must be positive")
        if self.read_consistency not in ("latest", "cached"):
            raise ValueError('contexts.read_consistency must be "latest" or "cached"')
        if self.watch_poll_interval <= 0:
            raise ValueError("contexts.watch_poll_interval must be positive")
        for name in ("conversation_ttl", "expire_interval", "fence_hold"):
            if getattr(self, name) < 0:
                raise ValueError(f"contexts.{name} must be 0 (off) or positive")


@dataclass
class CompactionConfig:
    #: Summariser plugin that Compact and the automatic trigger use by default:
    #: "extractive" (built in, needs no model) or "openai" (any OpenAI-compatible
    #: chat-completions endpoint: vLLM, llama.cpp server, Ollama, hosted APIs).
    summariser: str = "extractive"
    #: Base URL of the OpenAI-compatible API, e.g. "http://127.0.0.1:8000/v1".
    openai_base_url: str = ""
    #: Model name sent with each request.
    openai_model: str = ""
    #: API key; used first when set (prefer the file or the environment). Never logged.
    openai_api_key: str = field(default="", repr=False)
    #: File holding the API key (read at start-up); used before the environment.
    openai_api_key_file: str = ""
    #: Environment variable holding the API key when neither of the above is set
    #: (no key at all suits servers without authentication).
    openai_api_key_env: str = "OPENAI_API_KEY"
    #: Seconds one request may take.
    openai_timeout: float = 120.0
    #: Retries of a request after a timeout, connection error, 429 or 5xx.
    openai_max_retries: int = 2
    #: Answer allowance per request, in tokens.
    openai_max_output_tokens: int = 4096
    #: The summariser model's context window, in tokens; the excerpt is trimmed
    #: or sent in several passes to fit it.
    openai_window: int = 32_768
    #: Structured output requested: "json_schema", "json_object" or "none"
    #: (servers that reject the requested kind are retried with the next one).
    openai_response_format: str = "json_schema"
    #: Most summariser calls one compaction makes (passes over the excerpt).
    max_passes: int = 8
    #: Most items kept in each summary list (oldest dropped).
    list_cap: int = 32
    #: Longest narrative kept, in characters (oldest paragraphs dropped).
    narrative_max_chars: int = 4000
    #: Characters of one message's content shown to the summariser.
    clip_chars: int = 2000
    #: A tool call without a result pins the cut (it is never folded) until
    #: this many user messages have followed it; it then counts as abandoned,
    #: the summary says so, and a late result is still accepted (the call is
    #: restated before it in the transcript).
    open_call_max_turns: int = 8
    #: Most artifacts (paths, commands, URLs, ids, error codes, tool calls)
    #: the summary's verbatim ledger keeps; the most recent are kept.
    ledger_max_items: int = 256
    #: Most bytes of the rendered ledger.
    ledger_max_bytes: int = 8192
    #: Seconds before the first retry after a failed automatic compaction;
    #: doubles per consecutive failure up to backoff_max.
    backoff_initial: float = 30.0
    backoff_max: float = 1800.0
    #: Consecutive failures after which automatic compaction stops.
    backoff_stop_after: int = 5
    #: Seconds after which stopped automatic compaction tries again (0: only
    #: after a successful manual compaction or a restart).
    backoff_resume_after: float = 3600.0

    def validate(self) -> None:
        for name in ("open_call_max_turns", "ledger_max_items", "ledger_max_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"compaction.{name} must be positive")
        if self.summariser == "openai" and not (self.openai_base_url and self.openai_model):
            raise ValueError(
                'compaction.summariser "openai" needs compaction.openai_base_url and '
                "compaction.openai_model"
            )
        if self.openai_response_format not in {"json_schema", "json_object", "none"}:
            raise ValueError(
                'compaction.openai_response_format must be "json_schema", "json_object" or "none"'
            )
        if self.openai_max_output_tokens >= self.openai_window:
            raise ValueError("compaction.openai_max_output_tokens must be below openai_window")
        for name in (
            "openai_timeout",
            "openai_max_output_tokens",
            "openai_window",
            "max_passes",
            "list_cap",
            "narrative_max_chars",
            "clip_chars",
            "backoff_max",
            "backoff_stop_after",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"compaction.{name} must be positive")
        for name in ("openai_max_retries", "backoff_initial", "backoff_resume_after"):
            if getattr(self, name) < 0:
                raise ValueError(f"compaction.{name} must not be negative")
        if self.backoff_initial > self.backoff_max:
            raise ValueError("compaction.backoff_initial must not exceed backoff_max")


@dataclass
class PlanConfig:
    #: Most items in one plan.
    max_items: int = 32
    #: Longest item title, in characters (one line).
    max_title_chars: int = 200
    #: Longest goal, detail or note, in characters.
    max_text_chars: int = 4000
    #: Largest preflight verdict, in bytes of JSON text.
    max_preflight_bytes: int = 16 * 1024

    def validate(self) -> None:
        for name in ("max_items", "max_title_chars", "max_text_chars", "max_preflight_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"plan.{name} must be positive")


@dataclass
class SkillsConfig:
    #: MCP servers that offer skills, one ``name=target`` per line (or separated
    #: by ``;`` outside quotes). The target is an http(s) URL (streamable HTTP) or a command
    #: line run over stdio, e.g. ``docs=https://mcp.example/mcp;local=skills-srv --dir /x``.
    #: Names are 1-64 of ``[A-Za-z0-9_-]``; earlier servers win name collisions.
    servers: str = ""
    #: Seconds to start a server and complete the MCP handshake.
    connect_timeout: float = 10.0
    #: Seconds one MCP call (list, get, read) may take before the server counts as slow.
    call_timeout: float = 5.0
    #: Seconds between background catalogue refreshes (0 disables them).
    refresh_interval: float = 60.0
    #: Longest wait between reconnect attempts to a server that is down.
    max_backoff: float = 30.0
    #: Largest skill body in bytes; longer ones are truncated with a note.
    max_body_bytes: int = 32 * 1024
    #: Most skills loaded in one context.
    max_loaded: int = 8
    #: Bytes of skill bodies kept in memory (least recently used are dropped).
    cache_bytes: int = 16 * 1024 * 1024

    def server_specs(self) -> list[McpServerSpec]:
        """The parsed ``servers`` list; ValueError names the entry at fault."""
        import shlex

        specs: list[McpServerSpec] = []
        for raw in _split_entries(self.servers):
            entry = raw.strip()
            if not entry or entry.startswith("#"):
                continue
            name, sep, target = entry.partition("=")
            name, target = name.strip(), target.strip()
            if not sep or not name or not target:
                raise ValueError(f"skills.servers: {entry!r} is not name=target")
            if len(name) > 64 or not all(c.isascii() and (c.isalnum() or c in "_-") for c in name):
                raise ValueError(
                    f"skills.servers: server name {name!r} must be 1-64 of [A-Za-z0-9_-]"
                )
            if any(s.name == name for s in specs):
                raise ValueError(f"skills.servers: server name {name!r} is used twice")
            if target.startswith(("http://", "https://")):
                specs.append(McpServerSpec(name=name, url=target))
            else:
                try:
                    argv = shlex.split(target)
                except ValueError as exc:
                    raise ValueError(f"skills.servers: {name}: {exc}") from None
                specs.append(McpServerSpec(name=name, command=tuple(argv)))
        return specs

    def validate(self) -> None:
        self.server_specs()
        for name in ("connect_timeout", "call_timeout", "max_backoff"):
            if getattr(self, name) <= 0:
                raise ValueError(f"skills.{name} must be positive")
        if self.refresh_interval < 0:
            raise ValueError("skills.refresh_interval must be 0 (off) or positive")
        for name in ("max_body_bytes", "max_loaded", "cache_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"skills.{name} must be positive")


def _split_entries(text: str) -> list[str]:
    """Split at newlines and at ``;`` outside quotes (a command may quote a ``;``)."""
    entries: list[str] = []
    current: list[str] = []
    quote = ""
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in ";\n":
            entries.append("".join(current))
            current = []
            continue
        current.append(char)
    entries.append("".join(current))
    return entries


@dataclass(frozen=True)
class McpServerSpec:
    """One configured MCP server: a stdio command line or a streamable HTTP URL."""

    name: str
    command: tuple[str, ...] = ()
    url: str = ""

    def describe(self) -> str:
        """For logs: the URL without credentials or query, or the program name."""
        if self.url:
            from urllib.parse import urlsplit

            parts = urlsplit(self.url)
            return f"{parts.scheme}://{parts.hostname or ''}{parts.path}"
        return os.path.basename(self.command[0]) if self.command else ""


@dataclass
class PromptConfig:
    #: Markdown template file replacing the built-in one (sidecar/prompts/system.md).
    template_file: str = ""
    #: Operator instruction inserted where the template says ``{{instruction}}``.
    instruction: str = ""
    #: Seconds a conversation may be idle before its frozen prompt prefix is rebuilt.
    prefix_ttl: float = 20 * 60.0
    #: Most frozen prefixes kept, one per (context, agent); least recently used are dropped.
    prefix_cache_max: int = 4096

    def validate(self) -> None:
        if self.prefix_ttl < 0:
            raise ValueError("prompt.prefix_ttl must be 0 or more")
        if self.prefix_cache_max <= 0:
            raise ValueError("prompt.prefix_cache_max must be positive")
        if self.template_file:
            from sidecar.core.prompt import load_template

            load_template(self.template_file)


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
    plan: PlanConfig = field(default_factory=PlanConfig)
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    compaction: CompactionConfig = field(default_factory=CompactionConfig)

    def validate(self) -> None:
        """Raise ValueError naming the setting at fault."""
        self.compaction.validate()
        self.contexts.validate()
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
        self.plan.validate()
        self.skills.validate()
        self.prompt.validate()


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
