from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecuteRequest(_message.Message):
    __slots__ = ("sql", "at_ts")
    SQL_FIELD_NUMBER: _ClassVar[int]
    AT_TS_FIELD_NUMBER: _ClassVar[int]
    sql: str
    at_ts: int
    def __init__(self, sql: _Optional[str] = ..., at_ts: _Optional[int] = ...) -> None: ...

class StatementResult(_message.Message):
    __slots__ = ("statement", "columns", "rows_json", "affected_rows", "commit_ts")
    STATEMENT_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_JSON_FIELD_NUMBER: _ClassVar[int]
    AFFECTED_ROWS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    statement: str
    columns: _containers.RepeatedScalarFieldContainer[str]
    rows_json: _containers.RepeatedScalarFieldContainer[str]
    affected_rows: int
    commit_ts: int
    def __init__(self, statement: _Optional[str] = ..., columns: _Optional[_Iterable[str]] = ..., rows_json: _Optional[_Iterable[str]] = ..., affected_rows: _Optional[int] = ..., commit_ts: _Optional[int] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[StatementResult]
    def __init__(self, results: _Optional[_Iterable[_Union[StatementResult, _Mapping]]] = ...) -> None: ...
