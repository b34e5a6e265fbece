from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Vector(_message.Message):
    __slots__ = ("field", "values")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    field: str
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, field: _Optional[str] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class MemoryRecord(_message.Message):
    __slots__ = ("key", "value_json", "version", "updated_ms", "expires_at_ms", "by")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    key: str
    value_json: str
    version: str
    updated_ms: int
    expires_at_ms: int
    by: str
    def __init__(self, key: _Optional[str] = ..., value_json: _Optional[str] = ..., version: _Optional[str] = ..., updated_ms: _Optional[int] = ..., expires_at_ms: _Optional[int] = ..., by: _Optional[str] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: MemoryRecord
    def __init__(self, record: _Optional[_Union[MemoryRecord, _Mapping]] = ...) -> None: ...

class SetRequest(_message.Message):
    __slots__ = ("key", "value_json", "ttl_seconds", "expected_version", "create_only", "by", "vectors", "embed_fields")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    EMBED_FIELDS_FIELD_NUMBER: _ClassVar[int]
    key: str
    value_json: str
    ttl_seconds: int
    expected_version: str
    create_only: bool
    by: str
    vectors: _containers.RepeatedCompositeFieldContainer[Vector]
    embed_fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, key: _Optional[str] = ..., value_json: _Optional[str] = ..., ttl_seconds: _Optional[int] = ..., expected_version: _Optional[str] = ..., create_only: _Optional[bool] = ..., by: _Optional[str] = ..., vectors: _Optional[_Iterable[_Union[Vector, _Mapping]]] = ..., embed_fields: _Optional[_Iterable[str]] = ...) -> None: ...

class SetResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: MemoryRecord
    def __init__(self, record: _Optional[_Union[MemoryRecord, _Mapping]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("key", "expected_version")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    key: str
    expected_version: str
    def __init__(self, key: _Optional[str] = ..., expected_version: _Optional[str] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("prefix", "limit", "page_token", "include_values")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VALUES_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    limit: int
    page_token: str
    include_values: bool
    def __init__(self, prefix: _Optional[str] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ..., include_values: _Optional[bool] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("records", "next_page_token")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[MemoryRecord]
    next_page_token: str
    def __init__(self, records: _Optional[_Iterable[_Union[MemoryRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SearchRequest(_message.Message):
    __slots__ = ("prefix", "query_text", "query_vector", "filter_json", "limit", "offset", "include_values", "fields")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    QUERY_TEXT_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    FILTER_JSON_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_VALUES_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    query_text: str
    query_vector: _containers.RepeatedScalarFieldContainer[float]
    filter_json: str
    limit: int
    offset: int
    include_values: bool
    fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, prefix: _Optional[str] = ..., query_text: _Optional[str] = ..., query_vector: _Optional[_Iterable[float]] = ..., filter_json: _Optional[str] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ..., include_values: _Optional[bool] = ..., fields: _Optional[_Iterable[str]] = ...) -> None: ...

class SearchHit(_message.Message):
    __slots__ = ("record", "score", "field")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    record: MemoryRecord
    score: float
    field: str
    def __init__(self, record: _Optional[_Union[MemoryRecord, _Mapping]] = ..., score: _Optional[float] = ..., field: _Optional[str] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("hits",)
    HITS_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[SearchHit]
    def __init__(self, hits: _Optional[_Iterable[_Union[SearchHit, _Mapping]]] = ...) -> None: ...
