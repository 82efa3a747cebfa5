from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TableEntry(_message.Message):
    __slots__ = ("table_id", "schema", "name")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    schema: str
    name: str
    def __init__(self, table_id: _Optional[int] = ..., schema: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ListTablesRequest(_message.Message):
    __slots__ = ("schema", "pattern")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    schema: str
    pattern: str
    def __init__(self, schema: _Optional[str] = ..., pattern: _Optional[str] = ...) -> None: ...

class ListTablesResponse(_message.Message):
    __slots__ = ("tables", "tables_hash")
    TABLES_FIELD_NUMBER: _ClassVar[int]
    TABLES_HASH_FIELD_NUMBER: _ClassVar[int]
    tables: _containers.RepeatedCompositeFieldContainer[TableEntry]
    tables_hash: str
    def __init__(self, tables: _Optional[_Iterable[_Union[TableEntry, _Mapping]]] = ..., tables_hash: _Optional[str] = ...) -> None: ...

class WatchTableListRequest(_message.Message):
    __slots__ = ("schema", "pattern")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    schema: str
    pattern: str
    def __init__(self, schema: _Optional[str] = ..., pattern: _Optional[str] = ...) -> None: ...

class WatchTableListEvent(_message.Message):
    __slots__ = ("kind", "added", "removed", "tables_hash")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        INITIAL: _ClassVar[WatchTableListEvent.Kind]
        UPDATE: _ClassVar[WatchTableListEvent.Kind]
    INITIAL: WatchTableListEvent.Kind
    UPDATE: WatchTableListEvent.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    TABLES_HASH_FIELD_NUMBER: _ClassVar[int]
    kind: WatchTableListEvent.Kind
    added: _containers.RepeatedCompositeFieldContainer[TableEntry]
    removed: _containers.RepeatedCompositeFieldContainer[TableEntry]
    tables_hash: str
    def __init__(self, kind: _Optional[_Union[WatchTableListEvent.Kind, str]] = ..., added: _Optional[_Iterable[_Union[TableEntry, _Mapping]]] = ..., removed: _Optional[_Iterable[_Union[TableEntry, _Mapping]]] = ..., tables_hash: _Optional[str] = ...) -> None: ...
