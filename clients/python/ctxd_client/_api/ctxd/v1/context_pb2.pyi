from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ContextKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTEXT_KIND_UNSPECIFIED: _ClassVar[ContextKind]
    CONTEXT_KIND_ROOT: _ClassVar[ContextKind]
    CONTEXT_KIND_CONVERSATION: _ClassVar[ContextKind]

class PlanItemStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLAN_ITEM_STATUS_UNSPECIFIED: _ClassVar[PlanItemStatus]
    PLAN_ITEM_STATUS_PENDING: _ClassVar[PlanItemStatus]
    PLAN_ITEM_STATUS_IN_PROGRESS: _ClassVar[PlanItemStatus]
    PLAN_ITEM_STATUS_DONE: _ClassVar[PlanItemStatus]
    PLAN_ITEM_STATUS_BLOCKED: _ClassVar[PlanItemStatus]
    PLAN_ITEM_STATUS_SKIPPED: _ClassVar[PlanItemStatus]

class BindingKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BINDING_KIND_UNSPECIFIED: _ClassVar[BindingKind]
    BINDING_KIND_RUN: _ClassVar[BindingKind]
    BINDING_KIND_SUBAGENT: _ClassVar[BindingKind]
    BINDING_KIND_TASK: _ClassVar[BindingKind]

class ContextView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTEXT_VIEW_UNSPECIFIED: _ClassVar[ContextView]
    CONTEXT_VIEW_FULL: _ClassVar[ContextView]
    CONTEXT_VIEW_INFO: _ClassVar[ContextView]
    CONTEXT_VIEW_SLICE: _ClassVar[ContextView]

class ReadConsistency(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_CONSISTENCY_UNSPECIFIED: _ClassVar[ReadConsistency]
    READ_CONSISTENCY_LATEST: _ClassVar[ReadConsistency]
    READ_CONSISTENCY_CACHED: _ClassVar[ReadConsistency]

class MessageFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_FORMAT_UNSPECIFIED: _ClassVar[MessageFormat]
    MESSAGE_FORMAT_CTXD: _ClassVar[MessageFormat]
    MESSAGE_FORMAT_OPENAI: _ClassVar[MessageFormat]
    MESSAGE_FORMAT_ANTHROPIC: _ClassVar[MessageFormat]
    MESSAGE_FORMAT_OPENAI_RESPONSES: _ClassVar[MessageFormat]

class SliceChange(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SLICE_CHANGE_UNSPECIFIED: _ClassVar[SliceChange]
    SLICE_CHANGE_NONE: _ClassVar[SliceChange]
    SLICE_CHANGE_APPEND: _ClassVar[SliceChange]
    SLICE_CHANGE_REPLACE: _ClassVar[SliceChange]

class RunOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_OUTCOME_UNSPECIFIED: _ClassVar[RunOutcome]
    RUN_OUTCOME_SUCCEEDED: _ClassVar[RunOutcome]
    RUN_OUTCOME_FAILED: _ClassVar[RunOutcome]
    RUN_OUTCOME_CANCELLED: _ClassVar[RunOutcome]

class ContextEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTEXT_EVENT_KIND_UNSPECIFIED: _ClassVar[ContextEventKind]
    CONTEXT_EVENT_KIND_TURN: _ClassVar[ContextEventKind]
    CONTEXT_EVENT_KIND_COMPACTION: _ClassVar[ContextEventKind]
    CONTEXT_EVENT_KIND_COMPACTION_FAILED: _ClassVar[ContextEventKind]
    CONTEXT_EVENT_KIND_PLAN: _ClassVar[ContextEventKind]
    CONTEXT_EVENT_KIND_SKILLS: _ClassVar[ContextEventKind]
    CONTEXT_EVENT_KIND_PREFLIGHT: _ClassVar[ContextEventKind]
    CONTEXT_EVENT_KIND_DELETED: _ClassVar[ContextEventKind]
    CONTEXT_EVENT_KIND_TRUNCATED: _ClassVar[ContextEventKind]
CONTEXT_KIND_UNSPECIFIED: ContextKind
CONTEXT_KIND_ROOT: ContextKind
CONTEXT_KIND_CONVERSATION: ContextKind
PLAN_ITEM_STATUS_UNSPECIFIED: PlanItemStatus
PLAN_ITEM_STATUS_PENDING: PlanItemStatus
PLAN_ITEM_STATUS_IN_PROGRESS: PlanItemStatus
PLAN_ITEM_STATUS_DONE: PlanItemStatus
PLAN_ITEM_STATUS_BLOCKED: PlanItemStatus
PLAN_ITEM_STATUS_SKIPPED: PlanItemStatus
BINDING_KIND_UNSPECIFIED: BindingKind
BINDING_KIND_RUN: BindingKind
BINDING_KIND_SUBAGENT: BindingKind
BINDING_KIND_TASK: BindingKind
CONTEXT_VIEW_UNSPECIFIED: ContextView
CONTEXT_VIEW_FULL: ContextView
CONTEXT_VIEW_INFO: ContextView
CONTEXT_VIEW_SLICE: ContextView
READ_CONSISTENCY_UNSPECIFIED: ReadConsistency
READ_CONSISTENCY_LATEST: ReadConsistency
READ_CONSISTENCY_CACHED: ReadConsistency
MESSAGE_FORMAT_UNSPECIFIED: MessageFormat
MESSAGE_FORMAT_CTXD: MessageFormat
MESSAGE_FORMAT_OPENAI: MessageFormat
MESSAGE_FORMAT_ANTHROPIC: MessageFormat
MESSAGE_FORMAT_OPENAI_RESPONSES: MessageFormat
SLICE_CHANGE_UNSPECIFIED: SliceChange
SLICE_CHANGE_NONE: SliceChange
SLICE_CHANGE_APPEND: SliceChange
SLICE_CHANGE_REPLACE: SliceChange
RUN_OUTCOME_UNSPECIFIED: RunOutcome
RUN_OUTCOME_SUCCEEDED: RunOutcome
RUN_OUTCOME_FAILED: RunOutcome
RUN_OUTCOME_CANCELLED: RunOutcome
CONTEXT_EVENT_KIND_UNSPECIFIED: ContextEventKind
CONTEXT_EVENT_KIND_TURN: ContextEventKind
CONTEXT_EVENT_KIND_COMPACTION: ContextEventKind
CONTEXT_EVENT_KIND_COMPACTION_FAILED: ContextEventKind
CONTEXT_EVENT_KIND_PLAN: ContextEventKind
CONTEXT_EVENT_KIND_SKILLS: ContextEventKind
CONTEXT_EVENT_KIND_PREFLIGHT: ContextEventKind
CONTEXT_EVENT_KIND_DELETED: ContextEventKind
CONTEXT_EVENT_KIND_TRUNCATED: ContextEventKind

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments_json: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class SystemMessage(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class UserMessage(_message.Message):
    __slots__ = ("text", "principal")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    text: str
    principal: str
    def __init__(self, text: _Optional[str] = ..., principal: _Optional[str] = ...) -> None: ...

class AssistantMessage(_message.Message):
    __slots__ = ("text", "tool_calls")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    text: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    def __init__(self, text: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("call_id", "name", "json", "text", "is_error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    name: str
    json: str
    text: str
    is_error: bool
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., json: _Optional[str] = ..., text: _Optional[str] = ..., is_error: _Optional[bool] = ...) -> None: ...

class NoteMessage(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class NativePayload(_message.Message):
    __slots__ = ("format", "data")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    format: str
    data: bytes
    def __init__(self, format: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("id", "ts_ms", "system", "user", "assistant", "tool", "note", "native")
    ID_FIELD_NUMBER: _ClassVar[int]
    TS_MS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    NATIVE_FIELD_NUMBER: _ClassVar[int]
    id: str
    ts_ms: int
    system: SystemMessage
    user: UserMessage
    assistant: AssistantMessage
    tool: ToolResult
    note: NoteMessage
    native: NativePayload
    def __init__(self, id: _Optional[str] = ..., ts_ms: _Optional[int] = ..., system: _Optional[_Union[SystemMessage, _Mapping]] = ..., user: _Optional[_Union[UserMessage, _Mapping]] = ..., assistant: _Optional[_Union[AssistantMessage, _Mapping]] = ..., tool: _Optional[_Union[ToolResult, _Mapping]] = ..., note: _Optional[_Union[NoteMessage, _Mapping]] = ..., native: _Optional[_Union[NativePayload, _Mapping]] = ...) -> None: ...

class Summary(_message.Message):
    __slots__ = ("goals", "decisions", "open", "facts", "narrative", "covers_messages", "updated_ms")
    GOALS_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    NARRATIVE_FIELD_NUMBER: _ClassVar[int]
    COVERS_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    goals: _containers.RepeatedScalarFieldContainer[str]
    decisions: _containers.RepeatedScalarFieldContainer[str]
    open: _containers.RepeatedScalarFieldContainer[str]
    facts: _containers.RepeatedScalarFieldContainer[str]
    narrative: str
    covers_messages: int
    updated_ms: int
    def __init__(self, goals: _Optional[_Iterable[str]] = ..., decisions: _Optional[_Iterable[str]] = ..., open: _Optional[_Iterable[str]] = ..., facts: _Optional[_Iterable[str]] = ..., narrative: _Optional[str] = ..., covers_messages: _Optional[int] = ..., updated_ms: _Optional[int] = ...) -> None: ...

class SkillRef(_message.Message):
    __slots__ = ("name", "hash")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    name: str
    hash: str
    def __init__(self, name: _Optional[str] = ..., hash: _Optional[str] = ...) -> None: ...

class PlanBinding(_message.Message):
    __slots__ = ("kind", "id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    kind: BindingKind
    id: str
    def __init__(self, kind: _Optional[_Union[BindingKind, str]] = ..., id: _Optional[str] = ...) -> None: ...

class PlanItem(_message.Message):
    __slots__ = ("id", "title", "detail", "status", "note", "bound")
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    detail: str
    status: PlanItemStatus
    note: str
    bound: PlanBinding
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., detail: _Optional[str] = ..., status: _Optional[_Union[PlanItemStatus, str]] = ..., note: _Optional[str] = ..., bound: _Optional[_Union[PlanBinding, _Mapping]] = ...) -> None: ...

class Plan(_message.Message):
    __slots__ = ("goal", "items", "updated_ms")
    GOAL_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    goal: str
    items: _containers.RepeatedCompositeFieldContainer[PlanItem]
    updated_ms: int
    def __init__(self, goal: _Optional[str] = ..., items: _Optional[_Iterable[_Union[PlanItem, _Mapping]]] = ..., updated_ms: _Optional[int] = ...) -> None: ...

class Context(_message.Message):
    __slots__ = ("id", "kind", "version", "messages", "summary", "skills", "plan", "preflight_json", "est_tokens", "model_window", "principal", "task", "turns", "created_ms", "updated_ms", "model", "compactions", "cache_usage")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SKILLS_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    PREFLIGHT_JSON_FIELD_NUMBER: _ClassVar[int]
    EST_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_WINDOW_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    COMPACTIONS_FIELD_NUMBER: _ClassVar[int]
    CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: ContextKind
    version: int
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    summary: Summary
    skills: _containers.RepeatedCompositeFieldContainer[SkillRef]
    plan: Plan
    preflight_json: str
    est_tokens: int
    model_window: int
    principal: str
    task: str
    turns: int
    created_ms: int
    updated_ms: int
    model: str
    compactions: _containers.RepeatedCompositeFieldContainer[CompactionRecord]
    cache_usage: CacheUsage
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[_Union[ContextKind, str]] = ..., version: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., summary: _Optional[_Union[Summary, _Mapping]] = ..., skills: _Optional[_Iterable[_Union[SkillRef, _Mapping]]] = ..., plan: _Optional[_Union[Plan, _Mapping]] = ..., preflight_json: _Optional[str] = ..., est_tokens: _Optional[int] = ..., model_window: _Optional[int] = ..., principal: _Optional[str] = ..., task: _Optional[str] = ..., turns: _Optional[int] = ..., created_ms: _Optional[int] = ..., updated_ms: _Optional[int] = ..., model: _Optional[str] = ..., compactions: _Optional[_Iterable[_Union[CompactionRecord, _Mapping]]] = ..., cache_usage: _Optional[_Union[CacheUsage, _Mapping]] = ...) -> None: ...

class CompactionRecord(_message.Message):
    __slots__ = ("id", "version", "first_message_id", "last_message_id", "folded", "tokens_before", "tokens_after", "artifacts", "summariser", "ts_ms", "expandable", "fidelity", "folded_sha256", "cache_cost")
    ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FIRST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    FOLDED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    SUMMARISER_FIELD_NUMBER: _ClassVar[int]
    TS_MS_FIELD_NUMBER: _ClassVar[int]
    EXPANDABLE_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_FIELD_NUMBER: _ClassVar[int]
    FOLDED_SHA256_FIELD_NUMBER: _ClassVar[int]
    CACHE_COST_FIELD_NUMBER: _ClassVar[int]
    id: str
    version: int
    first_message_id: str
    last_message_id: str
    folded: int
    tokens_before: int
    tokens_after: int
    artifacts: int
    summariser: str
    ts_ms: int
    expandable: bool
    fidelity: Fidelity
    folded_sha256: str
    cache_cost: CompactionCacheCost
    def __init__(self, id: _Optional[str] = ..., version: _Optional[int] = ..., first_message_id: _Optional[str] = ..., last_message_id: _Optional[str] = ..., folded: _Optional[int] = ..., tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., artifacts: _Optional[int] = ..., summariser: _Optional[str] = ..., ts_ms: _Optional[int] = ..., expandable: _Optional[bool] = ..., fidelity: _Optional[_Union[Fidelity, _Mapping]] = ..., folded_sha256: _Optional[str] = ..., cache_cost: _Optional[_Union[CompactionCacheCost, _Mapping]] = ...) -> None: ...

class CompactionCacheCost(_message.Message):
    __slots__ = ("predicted_write_tokens", "reported", "cache_write_tokens", "cached_input_tokens", "input_tokens")
    PREDICTED_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REPORTED_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    predicted_write_tokens: int
    reported: bool
    cache_write_tokens: int
    cached_input_tokens: int
    input_tokens: int
    def __init__(self, predicted_write_tokens: _Optional[int] = ..., reported: _Optional[bool] = ..., cache_write_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., input_tokens: _Optional[int] = ...) -> None: ...

class CacheUsage(_message.Message):
    __slots__ = ("reports", "input_tokens", "cached_input_tokens", "cache_write_tokens", "cache_read_share")
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_SHARE_FIELD_NUMBER: _ClassVar[int]
    reports: int
    input_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    cache_read_share: float
    def __init__(self, reports: _Optional[int] = ..., input_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., cache_write_tokens: _Optional[int] = ..., cache_read_share: _Optional[float] = ...) -> None: ...

class Fidelity(_message.Message):
    __slots__ = ("artifacts", "carried", "score", "kinds", "dropped", "artifacts_since_start", "carried_since_start")
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    CARRIED_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_SINCE_START_FIELD_NUMBER: _ClassVar[int]
    CARRIED_SINCE_START_FIELD_NUMBER: _ClassVar[int]
    artifacts: int
    carried: int
    score: float
    kinds: _containers.RepeatedCompositeFieldContainer[FidelityKind]
    dropped: _containers.RepeatedCompositeFieldContainer[DroppedArtifact]
    artifacts_since_start: int
    carried_since_start: float
    def __init__(self, artifacts: _Optional[int] = ..., carried: _Optional[int] = ..., score: _Optional[float] = ..., kinds: _Optional[_Iterable[_Union[FidelityKind, _Mapping]]] = ..., dropped: _Optional[_Iterable[_Union[DroppedArtifact, _Mapping]]] = ..., artifacts_since_start: _Optional[int] = ..., carried_since_start: _Optional[float] = ...) -> None: ...

class FidelityKind(_message.Message):
    __slots__ = ("kind", "artifacts", "carried")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    CARRIED_FIELD_NUMBER: _ClassVar[int]
    kind: str
    artifacts: int
    carried: int
    def __init__(self, kind: _Optional[str] = ..., artifacts: _Optional[int] = ..., carried: _Optional[int] = ...) -> None: ...

class DroppedArtifact(_message.Message):
    __slots__ = ("kind", "text")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    text: str
    def __init__(self, kind: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class CacheEffect(_message.Message):
    __slots__ = ("tokens_saved", "prefix_tokens_kept", "tokens_rewritten")
    TOKENS_SAVED_FIELD_NUMBER: _ClassVar[int]
    PREFIX_TOKENS_KEPT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_REWRITTEN_FIELD_NUMBER: _ClassVar[int]
    tokens_saved: int
    prefix_tokens_kept: int
    tokens_rewritten: int
    def __init__(self, tokens_saved: _Optional[int] = ..., prefix_tokens_kept: _Optional[int] = ..., tokens_rewritten: _Optional[int] = ...) -> None: ...

class ContextInfo(_message.Message):
    __slots__ = ("id", "kind", "version", "turns", "est_tokens", "updated_ms", "created_ms", "message_count", "model_window", "archived", "incarnation", "forked_from", "forked_at_version")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    EST_TOKENS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    MODEL_WINDOW_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    FORKED_AT_VERSION_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: ContextKind
    version: int
    turns: int
    est_tokens: int
    updated_ms: int
    created_ms: int
    message_count: int
    model_window: int
    archived: bool
    incarnation: str
    forked_from: str
    forked_at_version: int
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[_Union[ContextKind, str]] = ..., version: _Optional[int] = ..., turns: _Optional[int] = ..., est_tokens: _Optional[int] = ..., updated_ms: _Optional[int] = ..., created_ms: _Optional[int] = ..., message_count: _Optional[int] = ..., model_window: _Optional[int] = ..., archived: _Optional[bool] = ..., incarnation: _Optional[str] = ..., forked_from: _Optional[str] = ..., forked_at_version: _Optional[int] = ...) -> None: ...

class GetContextRequest(_message.Message):
    __slots__ = ("context_id", "view", "consistency", "page_size", "page_token", "since_version", "format", "cache_breakpoint", "since_incarnation", "last_n", "without_summary_blocks", "at_version")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SINCE_VERSION_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    CACHE_BREAKPOINT_FIELD_NUMBER: _ClassVar[int]
    SINCE_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    LAST_N_FIELD_NUMBER: _ClassVar[int]
    WITHOUT_SUMMARY_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    AT_VERSION_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    view: ContextView
    consistency: ReadConsistency
    page_size: int
    page_token: str
    since_version: int
    format: MessageFormat
    cache_breakpoint: bool
    since_incarnation: str
    last_n: int
    without_summary_blocks: bool
    at_version: int
    def __init__(self, context_id: _Optional[str] = ..., view: _Optional[_Union[ContextView, str]] = ..., consistency: _Optional[_Union[ReadConsistency, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., since_version: _Optional[int] = ..., format: _Optional[_Union[MessageFormat, str]] = ..., cache_breakpoint: _Optional[bool] = ..., since_incarnation: _Optional[str] = ..., last_n: _Optional[int] = ..., without_summary_blocks: _Optional[bool] = ..., at_version: _Optional[int] = ...) -> None: ...

class GetContextResponse(_message.Message):
    __slots__ = ("info", "context", "slice", "next_page_token", "change", "messages_json", "system_json")
    INFO_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    SLICE_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_JSON_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_JSON_FIELD_NUMBER: _ClassVar[int]
    info: ContextInfo
    context: Context
    slice: _containers.RepeatedCompositeFieldContainer[Message]
    next_page_token: str
    change: SliceChange
    messages_json: str
    system_json: str
    def __init__(self, info: _Optional[_Union[ContextInfo, _Mapping]] = ..., context: _Optional[_Union[Context, _Mapping]] = ..., slice: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., change: _Optional[_Union[SliceChange, str]] = ..., messages_json: _Optional[str] = ..., system_json: _Optional[str] = ...) -> None: ...

class ListContextsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "kind", "include_archived", "id_prefix")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    kind: ContextKind
    include_archived: bool
    id_prefix: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., kind: _Optional[_Union[ContextKind, str]] = ..., include_archived: _Optional[bool] = ..., id_prefix: _Optional[str] = ...) -> None: ...

class ListContextsResponse(_message.Message):
    __slots__ = ("contexts", "next_page_token")
    CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    contexts: _containers.RepeatedCompositeFieldContainer[ContextInfo]
    next_page_token: str
    def __init__(self, contexts: _Optional[_Iterable[_Union[ContextInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class AppendTurnRequest(_message.Message):
    __slots__ = ("context_id", "messages", "expected_version", "idempotency_key", "principal", "model_window", "model", "task", "messages_json", "format", "system_json", "read")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    MODEL_WINDOW_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_JSON_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_JSON_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    expected_version: int
    idempotency_key: str
    principal: str
    model_window: int
    model: str
    task: str
    messages_json: str
    format: MessageFormat
    system_json: str
    read: GetContextRequest
    def __init__(self, context_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., expected_version: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., principal: _Optional[str] = ..., model_window: _Optional[int] = ..., model: _Optional[str] = ..., task: _Optional[str] = ..., messages_json: _Optional[str] = ..., format: _Optional[_Union[MessageFormat, str]] = ..., system_json: _Optional[str] = ..., read: _Optional[_Union[GetContextRequest, _Mapping]] = ...) -> None: ...

class AppendTurnResponse(_message.Message):
    __slots__ = ("version", "est_tokens", "compaction_due", "message_ids", "replayed", "unknown_skills", "loaded_skills", "read", "incarnation")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    EST_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_DUE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_SKILLS_FIELD_NUMBER: _ClassVar[int]
    LOADED_SKILLS_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    version: int
    est_tokens: int
    compaction_due: bool
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    replayed: bool
    unknown_skills: _containers.RepeatedScalarFieldContainer[str]
    loaded_skills: _containers.RepeatedCompositeFieldContainer[SkillRef]
    read: GetContextResponse
    incarnation: str
    def __init__(self, version: _Optional[int] = ..., est_tokens: _Optional[int] = ..., compaction_due: _Optional[bool] = ..., message_ids: _Optional[_Iterable[str]] = ..., replayed: _Optional[bool] = ..., unknown_skills: _Optional[_Iterable[str]] = ..., loaded_skills: _Optional[_Iterable[_Union[SkillRef, _Mapping]]] = ..., read: _Optional[_Union[GetContextResponse, _Mapping]] = ..., incarnation: _Optional[str] = ...) -> None: ...

class DeleteContextRequest(_message.Message):
    __slots__ = ("context_id", "expected_version")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    expected_version: int
    def __init__(self, context_id: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class DeleteContextResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class PlanCompactionRequest(_message.Message):
    __slots__ = ("context_id", "keep_last", "target_tokens")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    keep_last: int
    target_tokens: int
    def __init__(self, context_id: _Optional[str] = ..., keep_last: _Optional[int] = ..., target_tokens: _Optional[int] = ...) -> None: ...

class PlanCompactionResponse(_message.Message):
    __slots__ = ("nothing_to_do", "reason", "plan_ref", "base_version", "fold_count", "fold_through_message_id", "system_prompt", "excerpt", "answer_schema_json", "tokens_before", "cache")
    NOTHING_TO_DO_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PLAN_REF_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    FOLD_COUNT_FIELD_NUMBER: _ClassVar[int]
    FOLD_THROUGH_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    EXCERPT_FIELD_NUMBER: _ClassVar[int]
    ANSWER_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    nothing_to_do: bool
    reason: str
    plan_ref: str
    base_version: int
    fold_count: int
    fold_through_message_id: str
    system_prompt: str
    excerpt: str
    answer_schema_json: str
    tokens_before: int
    cache: CacheEffect
    def __init__(self, nothing_to_do: _Optional[bool] = ..., reason: _Optional[str] = ..., plan_ref: _Optional[str] = ..., base_version: _Optional[int] = ..., fold_count: _Optional[int] = ..., fold_through_message_id: _Optional[str] = ..., system_prompt: _Optional[str] = ..., excerpt: _Optional[str] = ..., answer_schema_json: _Optional[str] = ..., tokens_before: _Optional[int] = ..., cache: _Optional[_Union[CacheEffect, _Mapping]] = ...) -> None: ...

class ApplyCompactionRequest(_message.Message):
    __slots__ = ("context_id", "plan_ref", "answer")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_REF_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    plan_ref: str
    answer: str
    def __init__(self, context_id: _Optional[str] = ..., plan_ref: _Optional[str] = ..., answer: _Optional[str] = ...) -> None: ...

class ApplyCompactionResponse(_message.Message):
    __slots__ = ("version", "folded", "tokens_before", "tokens_after", "summary", "evicted_skills", "cache", "compaction")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FOLDED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    EVICTED_SKILLS_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    version: int
    folded: int
    tokens_before: int
    tokens_after: int
    summary: Summary
    evicted_skills: _containers.RepeatedScalarFieldContainer[str]
    cache: CacheEffect
    compaction: CompactionRecord
    def __init__(self, version: _Optional[int] = ..., folded: _Optional[int] = ..., tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., summary: _Optional[_Union[Summary, _Mapping]] = ..., evicted_skills: _Optional[_Iterable[str]] = ..., cache: _Optional[_Union[CacheEffect, _Mapping]] = ..., compaction: _Optional[_Union[CompactionRecord, _Mapping]] = ...) -> None: ...

class CompactRequest(_message.Message):
    __slots__ = ("context_id", "keep_last", "target_tokens", "instructions", "summariser")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    SUMMARISER_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    keep_last: int
    target_tokens: int
    instructions: str
    summariser: str
    def __init__(self, context_id: _Optional[str] = ..., keep_last: _Optional[int] = ..., target_tokens: _Optional[int] = ..., instructions: _Optional[str] = ..., summariser: _Optional[str] = ...) -> None: ...

class CompactResponse(_message.Message):
    __slots__ = ("compacted", "reason", "version", "folded", "tokens_before", "tokens_after", "summary", "summariser", "cache", "compaction")
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FOLDED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SUMMARISER_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    compacted: bool
    reason: str
    version: int
    folded: int
    tokens_before: int
    tokens_after: int
    summary: Summary
    summariser: str
    cache: CacheEffect
    compaction: CompactionRecord
    def __init__(self, compacted: _Optional[bool] = ..., reason: _Optional[str] = ..., version: _Optional[int] = ..., folded: _Optional[int] = ..., tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., summary: _Optional[_Union[Summary, _Mapping]] = ..., summariser: _Optional[str] = ..., cache: _Optional[_Union[CacheEffect, _Mapping]] = ..., compaction: _Optional[_Union[CompactionRecord, _Mapping]] = ...) -> None: ...

class PlanItemSpec(_message.Message):
    __slots__ = ("id", "title", "detail")
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    detail: str
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class PlanCreate(_message.Message):
    __slots__ = ("goal", "items")
    GOAL_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    goal: str
    items: _containers.RepeatedCompositeFieldContainer[PlanItemSpec]
    def __init__(self, goal: _Optional[str] = ..., items: _Optional[_Iterable[_Union[PlanItemSpec, _Mapping]]] = ...) -> None: ...

class PlanUpdate(_message.Message):
    __slots__ = ("item_id", "status", "note", "title", "detail", "bind")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    BIND_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    status: PlanItemStatus
    note: str
    title: str
    detail: str
    bind: PlanBinding
    def __init__(self, item_id: _Optional[str] = ..., status: _Optional[_Union[PlanItemStatus, str]] = ..., note: _Optional[str] = ..., title: _Optional[str] = ..., detail: _Optional[str] = ..., bind: _Optional[_Union[PlanBinding, _Mapping]] = ...) -> None: ...

class PlanInsert(_message.Message):
    __slots__ = ("item", "position")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    item: PlanItemSpec
    position: int
    def __init__(self, item: _Optional[_Union[PlanItemSpec, _Mapping]] = ..., position: _Optional[int] = ...) -> None: ...

class PlanMove(_message.Message):
    __slots__ = ("item_id", "position")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    position: int
    def __init__(self, item_id: _Optional[str] = ..., position: _Optional[int] = ...) -> None: ...

class PlanClear(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdatePlanRequest(_message.Message):
    __slots__ = ("context_id", "create", "update", "insert", "move", "clear", "expected_version")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    INSERT_FIELD_NUMBER: _ClassVar[int]
    MOVE_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    create: PlanCreate
    update: PlanUpdate
    insert: PlanInsert
    move: PlanMove
    clear: PlanClear
    expected_version: int
    def __init__(self, context_id: _Optional[str] = ..., create: _Optional[_Union[PlanCreate, _Mapping]] = ..., update: _Optional[_Union[PlanUpdate, _Mapping]] = ..., insert: _Optional[_Union[PlanInsert, _Mapping]] = ..., move: _Optional[_Union[PlanMove, _Mapping]] = ..., clear: _Optional[_Union[PlanClear, _Mapping]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class UpdatePlanResponse(_message.Message):
    __slots__ = ("version", "plan")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    version: int
    plan: Plan
    def __init__(self, version: _Optional[int] = ..., plan: _Optional[_Union[Plan, _Mapping]] = ...) -> None: ...

class ReportRunRequest(_message.Message):
    __slots__ = ("context_id", "binding", "outcome", "reason")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    BINDING_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    binding: PlanBinding
    outcome: RunOutcome
    reason: str
    def __init__(self, context_id: _Optional[str] = ..., binding: _Optional[_Union[PlanBinding, _Mapping]] = ..., outcome: _Optional[_Union[RunOutcome, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class ReportRunResponse(_message.Message):
    __slots__ = ("version", "plan", "item_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    version: int
    plan: Plan
    item_id: str
    def __init__(self, version: _Optional[int] = ..., plan: _Optional[_Union[Plan, _Mapping]] = ..., item_id: _Optional[str] = ...) -> None: ...

class SetPreflightRequest(_message.Message):
    __slots__ = ("context_id", "verdict_json", "expected_version")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_JSON_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    verdict_json: str
    expected_version: int
    def __init__(self, context_id: _Optional[str] = ..., verdict_json: _Optional[str] = ..., expected_version: _Optional[int] = ...) -> None: ...

class SetPreflightResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class SkillInfo(_message.Message):
    __slots__ = ("name", "description", "when_to_use", "source", "available")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    WHEN_TO_USE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    when_to_use: str
    source: str
    available: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., when_to_use: _Optional[str] = ..., source: _Optional[str] = ..., available: _Optional[bool] = ...) -> None: ...

class ListSkillsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSkillsResponse(_message.Message):
    __slots__ = ("skills",)
    SKILLS_FIELD_NUMBER: _ClassVar[int]
    skills: _containers.RepeatedCompositeFieldContainer[SkillInfo]
    def __init__(self, skills: _Optional[_Iterable[_Union[SkillInfo, _Mapping]]] = ...) -> None: ...

class LoadSkillRequest(_message.Message):
    __slots__ = ("context_id", "name")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    name: str
    def __init__(self, context_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class LoadSkillResponse(_message.Message):
    __slots__ = ("version", "skill", "truncated")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SKILL_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    version: int
    skill: SkillRef
    truncated: bool
    def __init__(self, version: _Optional[int] = ..., skill: _Optional[_Union[SkillRef, _Mapping]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class UnloadSkillRequest(_message.Message):
    __slots__ = ("context_id", "name")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    name: str
    def __init__(self, context_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class UnloadSkillResponse(_message.Message):
    __slots__ = ("version", "unloaded")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UNLOADED_FIELD_NUMBER: _ClassVar[int]
    version: int
    unloaded: bool
    def __init__(self, version: _Optional[int] = ..., unloaded: _Optional[bool] = ...) -> None: ...

class RenderPromptRequest(_message.Message):
    __slots__ = ("context_id", "agent")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    agent: str
    def __init__(self, context_id: _Optional[str] = ..., agent: _Optional[str] = ...) -> None: ...

class RenderPromptResponse(_message.Message):
    __slots__ = ("prompt", "prefix_hash", "prefix_end", "prefix_rebuilt", "version")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HASH_FIELD_NUMBER: _ClassVar[int]
    PREFIX_END_FIELD_NUMBER: _ClassVar[int]
    PREFIX_REBUILT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    prefix_hash: str
    prefix_end: int
    prefix_rebuilt: bool
    version: int
    def __init__(self, prompt: _Optional[str] = ..., prefix_hash: _Optional[str] = ..., prefix_end: _Optional[int] = ..., prefix_rebuilt: _Optional[bool] = ..., version: _Optional[int] = ...) -> None: ...

class RecordUsageRequest(_message.Message):
    __slots__ = ("context_id", "input_tokens", "output_tokens", "model", "cached_input_tokens", "cache_write_tokens")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    input_tokens: int
    output_tokens: int
    model: str
    cached_input_tokens: int
    cache_write_tokens: int
    def __init__(self, context_id: _Optional[str] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., model: _Optional[str] = ..., cached_input_tokens: _Optional[int] = ..., cache_write_tokens: _Optional[int] = ...) -> None: ...

class RecordUsageResponse(_message.Message):
    __slots__ = ("est_tokens", "calibration", "cache_usage")
    EST_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_FIELD_NUMBER: _ClassVar[int]
    CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    est_tokens: int
    calibration: float
    cache_usage: CacheUsage
    def __init__(self, est_tokens: _Optional[int] = ..., calibration: _Optional[float] = ..., cache_usage: _Optional[_Union[CacheUsage, _Mapping]] = ...) -> None: ...

class WatchContextRequest(_message.Message):
    __slots__ = ("context_id",)
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    def __init__(self, context_id: _Optional[str] = ...) -> None: ...

class WatchContextResponse(_message.Message):
    __slots__ = ("context_id", "kind", "version", "ts_ms", "tokens_before", "tokens_after", "folded", "detail", "compaction")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TS_MS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    FOLDED_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    kind: ContextEventKind
    version: int
    ts_ms: int
    tokens_before: int
    tokens_after: int
    folded: int
    detail: str
    compaction: CompactionRecord
    def __init__(self, context_id: _Optional[str] = ..., kind: _Optional[_Union[ContextEventKind, str]] = ..., version: _Optional[int] = ..., ts_ms: _Optional[int] = ..., tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., folded: _Optional[int] = ..., detail: _Optional[str] = ..., compaction: _Optional[_Union[CompactionRecord, _Mapping]] = ...) -> None: ...

class ExpandCompactionRequest(_message.Message):
    __slots__ = ("context_id", "compaction_id", "page_size", "page_token")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    compaction_id: str
    page_size: int
    page_token: str
    def __init__(self, context_id: _Optional[str] = ..., compaction_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ExpandCompactionResponse(_message.Message):
    __slots__ = ("compaction", "messages", "next_page_token")
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    compaction: CompactionRecord
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    next_page_token: str
    def __init__(self, compaction: _Optional[_Union[CompactionRecord, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class TruncateContextRequest(_message.Message):
    __slots__ = ("context_id", "count", "after_message_id", "expected_version", "format")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    AFTER_MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    count: int
    after_message_id: str
    expected_version: int
    format: MessageFormat
    def __init__(self, context_id: _Optional[str] = ..., count: _Optional[int] = ..., after_message_id: _Optional[str] = ..., expected_version: _Optional[int] = ..., format: _Optional[_Union[MessageFormat, str]] = ...) -> None: ...

class TruncateContextResponse(_message.Message):
    __slots__ = ("version", "removed", "removed_json", "incarnation")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_JSON_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    version: int
    removed: _containers.RepeatedCompositeFieldContainer[Message]
    removed_json: str
    incarnation: str
    def __init__(self, version: _Optional[int] = ..., removed: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., removed_json: _Optional[str] = ..., incarnation: _Optional[str] = ...) -> None: ...

class CreateContextRequest(_message.Message):
    __slots__ = ("context_id", "principal", "model_window", "model", "task")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    MODEL_WINDOW_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    principal: str
    model_window: int
    model: str
    task: str
    def __init__(self, context_id: _Optional[str] = ..., principal: _Optional[str] = ..., model_window: _Optional[int] = ..., model: _Optional[str] = ..., task: _Optional[str] = ...) -> None: ...

class CreateContextResponse(_message.Message):
    __slots__ = ("created", "info")
    CREATED_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    created: bool
    info: ContextInfo
    def __init__(self, created: _Optional[bool] = ..., info: _Optional[_Union[ContextInfo, _Mapping]] = ...) -> None: ...

class ListVersionsRequest(_message.Message):
    __slots__ = ("context_id", "page_size", "page_token")
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    context_id: str
    page_size: int
    page_token: str
    def __init__(self, context_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class VersionInfo(_message.Message):
    __slots__ = ("version", "kind", "created_ms", "message_count", "est_tokens")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    EST_TOKENS_FIELD_NUMBER: _ClassVar[int]
    version: int
    kind: str
    created_ms: int
    message_count: int
    est_tokens: int
    def __init__(self, version: _Optional[int] = ..., kind: _Optional[str] = ..., created_ms: _Optional[int] = ..., message_count: _Optional[int] = ..., est_tokens: _Optional[int] = ...) -> None: ...

class ListVersionsResponse(_message.Message):
    __slots__ = ("versions", "next_page_token", "oldest_kept")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OLDEST_KEPT_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[VersionInfo]
    next_page_token: str
    oldest_kept: int
    def __init__(self, versions: _Optional[_Iterable[_Union[VersionInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., oldest_kept: _Optional[int] = ...) -> None: ...

class ForkContextRequest(_message.Message):
    __slots__ = ("source_id", "at_version", "context_id", "idempotency_key")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    AT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    at_version: int
    context_id: str
    idempotency_key: str
    def __init__(self, source_id: _Optional[str] = ..., at_version: _Optional[int] = ..., context_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class ForkContextResponse(_message.Message):
    __slots__ = ("info",)
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: ContextInfo
    def __init__(self, info: _Optional[_Union[ContextInfo, _Mapping]] = ...) -> None: ...
