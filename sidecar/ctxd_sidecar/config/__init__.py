"""Configuration: defaults < config file < ``CTXD_*`` environment < flags.

The config file is TOML (``--config PATH`` or ``CTXD_CONFIG``). Top-level keys
configure the server; tables configure a part::

    listen = "127.0.0.1:50051"
    store = "lmdb:///var/lib/ctxd"

    [memory]
    max_value_bytes = 65536

    [summariser.openai]          # a plugin's own table
    base_url = "http://127.0.0.1:11434/v1"

Every setting also has an environment variable: ``CTXD_<KEY>`` for top-level
keys, ``CTXD_<TABLE>_<KEY>`` for table keys (``CTXD_MEMORY_MAX_VALUE_BYTES``,
``CTXD_SUMMARISER_OPENAI_BASE_URL``), and a flag ``--set table.key=value``
(common ones have their own flags).

The tables are pydantic models, their limits field constraints; a plugin
declares its own tables through the ``ctxd_config_tables`` hook and reads them
back with :meth:`Config.table`. Loading is in :mod:`ctxd_sidecar.config.loader`; this
module holds the schema and imports nothing of the domain.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ctxd_sidecar.config.mcp_servers import McpServerSpec, parse_servers

Positive = Annotated[int, Field(gt=0)]

#: Longest duration a setting takes (100 years): "practically never" without
#: the overflow of ``int(1e308 * 1000)`` or of a socket timeout.
MAX_SECONDS = 100 * 365 * 24 * 3600


def _at_most_max_seconds(value: float) -> float:
    if value > MAX_SECONDS:
        raise ValueError(f"must be at most {MAX_SECONDS} seconds (100 years)")
    return value


#: Every float setting is finite: no setting gives ``inf`` or ``nan`` a
#: meaning, and either would reach the domain as a crash (``int(inf)``) or as
#: invalid JSON in a log line. :class:`Table` and :class:`Config` refuse them
#: for plain ``float`` fields too; these types carry it for plugin models.
#: Seconds, more than 0.
PositiveFloat = Annotated[
    float, Field(gt=0, allow_inf_nan=False), AfterValidator(_at_most_max_seconds)
]
#: Seconds where 0 means "off" (or "none").
NonNegative = Annotated[
    float, Field(ge=0, allow_inf_nan=False), AfterValidator(_at_most_max_seconds)
]

M = TypeVar("M", bound=BaseModel)


def _no_bool_for_numbers(model: type[BaseModel], value: Any, name: str | None) -> Any:
    """``max_keys = true`` is a mistake, not 1 (pydantic would accept it)."""
    if isinstance(value, bool) and name is not None:
        if model.model_fields[name].annotation in (int, float):
            raise ValueError("must be a number, not true or false")
    return value


class Table(BaseModel):
    """A config table: unknown keys are errors. Plugins subclass it for theirs."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_numbers(cls, value: Any, info: Any) -> Any:
        return _no_bool_for_numbers(cls, value, info.field_name)


class MemoryConfig(Table):
    #: Largest value, in bytes of JSON text (a value exactly this size is accepted).
    max_value_bytes: Positive = 64 * 1024
    #: Most keys per instance, all replicas sharing a store together
    #: (expired records count until swept; a write that would exceed a cap
    #: sweeps them first).
    max_keys: Positive = 10_000
    #: Most bytes of values (JSON text) per instance, all replicas together.
    max_total_bytes: Positive = 64 * 1024 * 1024
    #: Deepest JSON nesting accepted in a value (arrays and objects).
    max_depth: Positive = 64
    #: Seconds between sweeps of expired records (0 disables the sweeper;
    #: expired records are never returned either way).
    sweep_interval: NonNegative = 60.0
    #: Route memory operations to an MCP server's tools instead of the store:
    #: a command line (stdio) or an http(s) URL; empty keeps the store.
    mcp_server: str = ""
    #: Tool names for the MCP override, as OPERATION=TOOL pairs separated by
    #: commas (operations get, set, delete, list); unnamed ones default to
    #: memory_get, memory_set, memory_delete, memory_list.
    mcp_tools: str = ""
    #: Seconds to wait for the MCP memory server to answer one call (it gets
    #: at least 60 s to start).
    mcp_timeout: PositiveFloat = 10.0
    #: The embedder that turns text into vectors for Search (``embed_fields``
    #: on Set, ``query_text`` on Search), e.g. "openai" (configured in
    #: ``[embedder.openai]``); empty: callers give vectors themselves.
    embedder: str = ""
    #: Similarity of memory search: "cosine", "dot" or "l2"; fixed for an
    #: instance by its first vector (the stored metric wins afterwards).
    search_metric: Literal["cosine", "dot", "l2"] = "cosine"
    #: Vectors under a prefix beyond which search is approximate (HNSW, the
    #: ``search`` extra); fewer are ranked exactly.
    search_approx_threshold: Positive = 20_000
    #: Seconds between rescans of the store for vectors other sidecars wrote,
    #: on a shared store without a change feed (0: never).
    search_refresh: NonNegative = 5.0


class ContextsConfig(Table):
    #: Most contexts kept in memory (least recently used are evicted).
    cache_max_contexts: Positive = 1_000
    #: Most bytes of transcript kept in memory across cached contexts.
    cache_max_bytes: Positive = 256 * 1024 * 1024
    #: Seconds a conversation may stay idle before it is closed (0: never).
    conversation_ttl: NonNegative = 30 * 24 * 3600.0
    #: What closing an idle conversation does.
    on_expire: Literal["delete", "archive"] = "archive"
    #: Window assumed when neither model_window nor a known model is given.
    default_model_window: Positive = 128_000
    #: Largest single message, in bytes of text/JSON.
    max_message_bytes: Positive = 1024 * 1024
    #: Most messages in one AppendTurn.
    max_turn_messages: Positive = 256
    #: Automatic compaction threshold as a fraction of the model window.
    compact_at: Annotated[float, Field(gt=0, le=1)] = 0.7
    #: Run compaction automatically when the threshold is passed.
    auto_compact: bool = True
    #: Messages kept verbatim by compaction.
    keep_last: Positive = 12
    #: Versions between background checkpoints (segment + head) of a context.
    checkpoint_every: Positive = 64
    #: Bytes of new messages that trigger a checkpoint before checkpoint_every.
    checkpoint_bytes: Positive = 1024 * 1024
    #: Seconds earlier versions of a context stay readable (GetContext
    #: at_version, ListVersions; 0: only the latest). Unlike
    #: compaction.archive_ttl (folded messages for ExpandCompaction), it keeps
    #: whole versions: a head copy per checkpoint and the records after it.
    history_ttl: NonNegative = 7 * 24 * 3600.0
    #: Idempotency keys remembered per context (older ones are forgotten).
    idempotency_keys: Positive = 256
    #: Seconds between sweeps for idle conversations (0 disables the sweep).
    expire_interval: NonNegative = 3600.0
    #: What reads of a context reflect on a store shared by replicas (S3):
    #: "latest" (every write any replica acknowledged before the read, at the
    #: cost of one small request) or "cached" (this replica's copy, which may
    #: lag other replicas' writes). Stores used by one process ignore it.
    read_consistency: Literal["latest", "cached"] = "latest"
    #: Seconds between checks for other replicas' changes of a watched context.
    watch_poll_interval: PositiveFloat = 0.5
    #: Seconds a deleted conversation's fence record stays on a shared store,
    #: so a replica holding an old copy can never append to it.
    fence_hold: NonNegative = 600.0


class CompactionConfig(Table):
    #: Summariser plugin that Compact and the automatic trigger use by default:
    #: "extractive" (built in, needs no model), "openai" (any OpenAI-compatible
    #: chat-completions endpoint, configured in ``[summariser.openai]``) or
    #: whatever an installed plugin offers.
    summariser: str = "extractive"
    #: Most summariser calls one compaction makes (passes over the excerpt).
    max_passes: Positive = 8
    #: Most items kept in each summary list (oldest dropped).
    list_cap: Positive = 32
    #: Longest narrative kept, in characters (oldest paragraphs dropped).
    narrative_max_chars: Positive = 4000
    #: Characters of one message's content shown to the summariser.
    clip_chars: Positive = 2000
    #: A tool call without a result pins the cut (it is never folded) until
    #: this many user messages have followed it; it then counts as abandoned,
    #: the summary says so, and a late result is still accepted (the call is
    #: restated before it in the transcript).
    open_call_max_turns: Positive = 8
    #: Most artifacts (paths, commands, URLs, ids, error codes, tool calls)
    #: the summary's verbatim ledger keeps; the most recent are kept.
    ledger_max_items: Positive = 256
    #: Most bytes of the rendered ledger.
    ledger_max_bytes: Positive = 8192
    #: Least share (0..1) of a folded span's verbatim artifacts a compaction
    #: must still carry (its fidelity score); below it the compaction is
    #: declined (reason LOW_FIDELITY) and the context left as it was. 0: off.
    min_fidelity: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0
    #: Seconds the messages a compaction folded stay in the store, for
    #: ExpandCompaction (0: deleted with their segments at the next checkpoint).
    #: They go with the context in any case. Earlier versions of a context
    #: are kept by contexts.history_ttl.
    archive_ttl: NonNegative = 30 * 24 * 3600.0
    #: Seconds before the first retry after a failed automatic compaction;
    #: doubles per consecutive failure up to backoff_max.
    backoff_initial: NonNegative = 30.0
    backoff_max: PositiveFloat = 1800.0
    #: Consecutive failures after which automatic compaction stops.
    backoff_stop_after: Positive = 5
    #: Seconds after which stopped automatic compaction tries again (0: only
    #: after a successful manual compaction or a restart).
    backoff_resume_after: NonNegative = 3600.0

    @model_validator(mode="after")
    def _backoff_in_order(self) -> CompactionConfig:
        if self.backoff_initial > self.backoff_max:
            raise ValueError("compaction.backoff_initial must not exceed backoff_max")
        return self


class PlanConfig(Table):
    #: Most items in one plan.
    max_items: Positive = 32
    #: Longest item title, in characters (one line).
    max_title_chars: Positive = 200
    #: Longest goal, detail or note, in characters.
    max_text_chars: Positive = 4000
    #: Largest preflight verdict, in bytes of JSON text.
    max_preflight_bytes: Positive = 16 * 1024


class SkillsConfig(Table):
    #: MCP servers that offer skills, one ``name=target`` per line (or separated
    #: by ``;`` outside quotes). The target is an http(s) URL (streamable HTTP) or a command
    #: line run over stdio, e.g. ``docs=https://mcp.example/mcp;local=skills-srv --dir /x``.
    #: Names are 1-64 of ``[A-Za-z0-9_-]``; earlier servers win name collisions.
    servers: str = ""
    #: Seconds to start a server and complete the MCP handshake.
    connect_timeout: PositiveFloat = 10.0
    #: Seconds one MCP call (list, get, read) may take before the server counts as slow.
    call_timeout: PositiveFloat = 5.0
    #: Seconds between background catalogue refreshes (0 disables them).
    refresh_interval: NonNegative = 60.0
    #: Longest wait between reconnect attempts to a server that is down.
    max_backoff: PositiveFloat = 30.0
    #: Largest skill body in bytes; longer ones are truncated with a note.
    max_body_bytes: Positive = 32 * 1024
    #: Most skills loaded in one context.
    max_loaded: Positive = 8
    #: Bytes of skill bodies kept in memory (least recently used are dropped).
    cache_bytes: Positive = 16 * 1024 * 1024

    @field_validator("servers")
    @classmethod
    def _servers_parse(cls, value: str) -> str:
        parse_servers(value)
        return value

    def server_specs(self) -> list[McpServerSpec]:
        """The parsed ``servers`` list; ValueError names the entry at fault."""
        return parse_servers(self.servers)


class PromptConfig(Table):
    #: Markdown template file replacing the built-in one (sidecar/ctxd_sidecar/prompts/system.md);
    #: checked when the config is loaded, re-read when a prefix is rebuilt.
    template_file: str = ""
    #: Operator instruction inserted where the template says ``{{instruction}}``.
    instruction: str = ""
    #: Seconds a conversation may be idle before its frozen prompt prefix is rebuilt.
    prefix_ttl: NonNegative = 20 * 60.0
    #: Most frozen prefixes kept, one per (context, agent); least recently used are dropped.
    prefix_cache_max: Positive = 4096


#: Level names ``log_level`` accepts (any case).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


#: One key segment: what ``prefix`` and ``instance`` may be.
NAMESPACE_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
#: The namespaces ctxd writes under ``<prefix>/<instance>/`` (a test checks
#: this list against the code that writes them).
RESERVED_SEGMENTS = frozenset(
    {"memory", "contexts", "context-log", "context-seg", "context-trash", "health"}
)


class Config(BaseSettings):
    """The whole configuration. ``Config()`` is the defaults (plus arguments);
    :func:`load` adds the file, the environment, flags and plugin tables."""

    model_config = SettingsConfigDict(extra="forbid", validate_default=False, allow_inf_nan=False)

    #: gRPC address: host:port, or unix:PATH.
    listen: str = "127.0.0.1:50051"
    #: Store URI; the scheme picks the plugin.
    store: str = "lmdb://ctxd-data"
    #: First key segment in the store; lets unrelated deployments share one.
    prefix: str = "ctxd"
    #: The instance namespace this sidecar serves.
    instance: str = "default"
    #: Seconds in-flight calls get to finish on SIGTERM (0: none).
    grace_seconds: NonNegative = 10.0
    #: Seconds between store health probes; while the store fails them, the
    #: ctxd services report NOT_SERVING (the process itself stays SERVING);
    #: 0 disables the probes.
    store_probe_interval: NonNegative = 5.0
    #: Prometheus metrics address (host:port); empty disables it.
    metrics_listen: str = ""
    #: File holding the bearer token callers must send (preferred over
    #: ``auth_token``); both empty disables auth.
    auth_token_file: str = ""
    #: The bearer token itself, for ``CTXD_AUTH_TOKEN``; never put it in a
    #: config file that others can read.
    auth_token: str = Field(default="", repr=False)
    #: Seconds the previous token is still accepted after ``auth_token_file``
    #: changes (the file is re-read at most once a second while calls
    #: arrive), so clients that re-read it later are not locked out; 0
    #: refuses the previous token at once.
    auth_token_grace: NonNegative = 300.0
    #: TLS certificate and key (PEM files); both empty means plaintext.
    tls_cert_file: str = ""
    tls_key_file: str = ""
    #: CA bundle to verify client certificates (mTLS); empty: no client certs.
    tls_client_ca_file: str = ""
    #: DEBUG, INFO, WARNING, ERROR or CRITICAL (any case; kept upper-case).
    log_level: str = "INFO"
    #: "json" (structured, one object per line) or "text".
    log_format: Literal["json", "text"] = "json"
    #: Level of the one access line per RPC (DEBUG, INFO, WARNING, ERROR,
    #: CRITICAL), or "off" for none.
    access_log_level: str = "INFO"
    #: OTLP/gRPC collector for traces, e.g. "http://127.0.0.1:4317" (plaintext)
    #: or "https://…"; empty disables tracing (the ``otel`` extra).
    otlp_endpoint: str = ""
    #: ``service.name`` of the exported spans.
    otel_service_name: str = "ctxd"
    #: Most WatchContext streams open at once; more are RESOURCE_EXHAUSTED.
    max_watch_streams: Positive = 256
    #: Most Health.Watch streams open at once (probes need no token, so they
    #: are capped on their own).
    max_health_watch_streams: Positive = 64
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    contexts: ContextsConfig = Field(default_factory=ContextsConfig)
    plan: PlanConfig = Field(default_factory=PlanConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)

    _warnings: list[str] = PrivateAttr(default_factory=list)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Constructing a Config never reads the process environment; load()
        # passes its own sources (file, CTXD_* environment, flags).
        return (init_settings,)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_numbers(cls, value: Any, info: Any) -> Any:
        return _no_bool_for_numbers(cls, value, info.field_name)

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.upper() not in LOG_LEVELS:
            raise ValueError(f"must be {', '.join(LOG_LEVELS[:-1])} or {LOG_LEVELS[-1]}")
        return value.upper()

    @field_validator("access_log_level")
    @classmethod
    def _known_access_level(cls, value: str) -> str:
        if value.lower() == "off":
            return "OFF"
        if value.upper() not in LOG_LEVELS:
            raise ValueError(f"must be {', '.join(LOG_LEVELS)} or off")
        return value.upper()

    @field_validator("prefix", "instance")
    @classmethod
    def _one_segment(cls, value: str, info) -> str:
        """``prefix`` and ``instance`` are one key segment each, never a name
        ctxd writes under: then no two deployments' key spaces on one bucket
        can nest (``prefix=ctxd/default`` would read ``prefix=ctxd``'s memory)."""
        if not NAMESPACE_SEGMENT.fullmatch(value):
            raise ValueError(
                "must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        if value in RESERVED_SEGMENTS:
            raise ValueError(f"{value!r} is a name ctxd keeps records under; choose another")
        return value

    @model_validator(mode="after")
    def _tls_files_together(self) -> Config:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file must be set together")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError("tls_client_ca_file needs tls_cert_file and tls_key_file")
        return self

    def table(self, name: str, model: type[M]) -> M:
        """A plugin's table by dotted name (``"summariser.openai"``), validated;
        its defaults when this Config was built without that plugin's tables."""
        node: Any = self
        for part in name.split("."):
            node = getattr(node, part, None)
            if node is None:
                return model()
        if not isinstance(node, model):
            raise TypeError(
                f"config table {name!r} is a {type(node).__name__}, not {model.__name__}"
            )
        return node

    @property
    def warnings(self) -> tuple[str, ...]:
        """What loading noticed but let pass (unknown CTXD_* variables, old
        names); the CLI logs them once logging is set up."""
        return tuple(self._warnings)


@dataclass(frozen=True)
class ConfigTable:
    """A table a plugin adds to the configuration (``ctxd_config_tables`` hook).

    ``name`` is dotted (``"summariser.openai"`` is ``[summariser.openai]`` in
    TOML and ``CTXD_SUMMARISER_OPENAI_<KEY>`` in the environment); it must not
    start with a core setting's name. Every field of ``model`` needs a default:
    an installed plugin that is not configured must not stop start-up.
    """

    name: str
    model: type[BaseModel]


class ConfigError(ValueError):
    """A bad configuration; the message is one line naming the setting."""


def dotted_to_nested(pairs: Mapping[str, Any]) -> dict[str, Any]:
    """``{"memory.max_keys": 5}`` as ``{"memory": {"max_keys": 5}}``."""
    out: dict[str, Any] = {}
    for dotted, value in pairs.items():
        *tables, key = dotted.split(".")
        node = out
        for t in tables:
            child = node.setdefault(t, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{dotted}: {t} is a setting, not a table")
            node = child
        node[key] = value
    return out
