from cdc_core.proto import errorpb_pb2 as _errorpb_pb2
from cdc_core.proto import metapb_pb2 as _metapb_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExtraOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Noop: _ClassVar[ExtraOp]
    ReadOldValue: _ClassVar[ExtraOp]

class CommandPri(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Normal: _ClassVar[CommandPri]
    Low: _ClassVar[CommandPri]
    High: _ClassVar[CommandPri]

class IsolationLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SI: _ClassVar[IsolationLevel]
    RC: _ClassVar[IsolationLevel]
    RCCheckTS: _ClassVar[IsolationLevel]

class Op(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Put: _ClassVar[Op]
    Del: _ClassVar[Op]
    Lock: _ClassVar[Op]
    Rollback: _ClassVar[Op]
    Insert: _ClassVar[Op]
    PessimisticLock: _ClassVar[Op]
    CheckNotExists: _ClassVar[Op]
Noop: ExtraOp
ReadOldValue: ExtraOp
Normal: CommandPri
Low: CommandPri
High: CommandPri
SI: IsolationLevel
RC: IsolationLevel
RCCheckTS: IsolationLevel
Put: Op
Del: Op
Lock: Op
Rollback: Op
Insert: Op
PessimisticLock: Op
CheckNotExists: Op

class GetRequest(_message.Message):
    __slots__ = ("context", "key", "version", "need_commit_ts")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NEED_COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    context: Context
    key: bytes
    version: int
    need_commit_ts: bool
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ..., key: _Optional[bytes] = ..., version: _Optional[int] = ..., need_commit_ts: _Optional[bool] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("region_error", "error", "value", "not_found", "commit_ts")
    REGION_ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    region_error: _errorpb_pb2.Error
    error: KeyError
    value: bytes
    not_found: bool
    commit_ts: int
    def __init__(self, region_error: _Optional[_Union[_errorpb_pb2.Error, _Mapping]] = ..., error: _Optional[_Union[KeyError, _Mapping]] = ..., value: _Optional[bytes] = ..., not_found: _Optional[bool] = ..., commit_ts: _Optional[int] = ...) -> None: ...

class ScanRequest(_message.Message):
    __slots__ = ("context", "start_key", "limit", "version", "key_only", "reverse", "end_key", "sample_step")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    KEY_ONLY_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_STEP_FIELD_NUMBER: _ClassVar[int]
    context: Context
    start_key: bytes
    limit: int
    version: int
    key_only: bool
    reverse: bool
    end_key: bytes
    sample_step: int
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ..., start_key: _Optional[bytes] = ..., limit: _Optional[int] = ..., version: _Optional[int] = ..., key_only: _Optional[bool] = ..., reverse: _Optional[bool] = ..., end_key: _Optional[bytes] = ..., sample_step: _Optional[int] = ...) -> None: ...

class ScanResponse(_message.Message):
    __slots__ = ("region_error", "pairs", "error")
    REGION_ERROR_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    region_error: _errorpb_pb2.Error
    pairs: _containers.RepeatedCompositeFieldContainer[KvPair]
    error: KeyError
    def __init__(self, region_error: _Optional[_Union[_errorpb_pb2.Error, _Mapping]] = ..., pairs: _Optional[_Iterable[_Union[KvPair, _Mapping]]] = ..., error: _Optional[_Union[KeyError, _Mapping]] = ...) -> None: ...

class BatchGetRequest(_message.Message):
    __slots__ = ("context", "keys", "version", "need_commit_ts")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NEED_COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    context: Context
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    version: int
    need_commit_ts: bool
    def __init__(self, context: _Optional[_Union[Context, _Mapping]] = ..., keys: _Optional[_Iterable[bytes]] = ..., version: _Optional[int] = ..., need_commit_ts: _Optional[bool] = ...) -> None: ...

class BatchGetResponse(_message.Message):
    __slots__ = ("region_error", "pairs", "error")
    REGION_ERROR_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    region_error: _errorpb_pb2.Error
    pairs: _containers.RepeatedCompositeFieldContainer[KvPair]
    error: KeyError
    def __init__(self, region_error: _Optional[_Union[_errorpb_pb2.Error, _Mapping]] = ..., pairs: _Optional[_Iterable[_Union[KvPair, _Mapping]]] = ..., error: _Optional[_Union[KeyError, _Mapping]] = ...) -> None: ...

class Context(_message.Message):
    __slots__ = ("region_id", "region_epoch", "peer", "term", "priority", "isolation_level", "not_fill_cache", "sync_log", "record_time_stat", "record_scan_stat", "replica_read", "resolved_locks", "max_execution_duration_ms", "stale_read", "committed_locks", "request_source", "txn_source", "cluster_id")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    REGION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    NOT_FILL_CACHE_FIELD_NUMBER: _ClassVar[int]
    SYNC_LOG_FIELD_NUMBER: _ClassVar[int]
    RECORD_TIME_STAT_FIELD_NUMBER: _ClassVar[int]
    RECORD_SCAN_STAT_FIELD_NUMBER: _ClassVar[int]
    REPLICA_READ_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_LOCKS_FIELD_NUMBER: _ClassVar[int]
    MAX_EXECUTION_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    STALE_READ_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_LOCKS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SOURCE_FIELD_NUMBER: _ClassVar[int]
    TXN_SOURCE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    region_epoch: _metapb_pb2.RegionEpoch
    peer: _metapb_pb2.Peer
    term: int
    priority: CommandPri
    isolation_level: IsolationLevel
    not_fill_cache: bool
    sync_log: bool
    record_time_stat: bool
    record_scan_stat: bool
    replica_read: bool
    resolved_locks: _containers.RepeatedScalarFieldContainer[int]
    max_execution_duration_ms: int
    stale_read: bool
    committed_locks: _containers.RepeatedScalarFieldContainer[int]
    request_source: str
    txn_source: int
    cluster_id: int
    def __init__(self, region_id: _Optional[int] = ..., region_epoch: _Optional[_Union[_metapb_pb2.RegionEpoch, _Mapping]] = ..., peer: _Optional[_Union[_metapb_pb2.Peer, _Mapping]] = ..., term: _Optional[int] = ..., priority: _Optional[_Union[CommandPri, str]] = ..., isolation_level: _Optional[_Union[IsolationLevel, str]] = ..., not_fill_cache: _Optional[bool] = ..., sync_log: _Optional[bool] = ..., record_time_stat: _Optional[bool] = ..., record_scan_stat: _Optional[bool] = ..., replica_read: _Optional[bool] = ..., resolved_locks: _Optional[_Iterable[int]] = ..., max_execution_duration_ms: _Optional[int] = ..., stale_read: _Optional[bool] = ..., committed_locks: _Optional[_Iterable[int]] = ..., request_source: _Optional[str] = ..., txn_source: _Optional[int] = ..., cluster_id: _Optional[int] = ...) -> None: ...

class LockInfo(_message.Message):
    __slots__ = ("primary_lock", "lock_version", "key", "lock_ttl", "txn_size", "lock_type", "lock_for_update_ts", "use_async_commit", "min_commit_ts", "secondaries", "duration_to_last_update_ms", "is_txn_file")
    PRIMARY_LOCK_FIELD_NUMBER: _ClassVar[int]
    LOCK_VERSION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LOCK_TTL_FIELD_NUMBER: _ClassVar[int]
    TXN_SIZE_FIELD_NUMBER: _ClassVar[int]
    LOCK_TYPE_FIELD_NUMBER: _ClassVar[int]
    LOCK_FOR_UPDATE_TS_FIELD_NUMBER: _ClassVar[int]
    USE_ASYNC_COMMIT_FIELD_NUMBER: _ClassVar[int]
    MIN_COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    SECONDARIES_FIELD_NUMBER: _ClassVar[int]
    DURATION_TO_LAST_UPDATE_MS_FIELD_NUMBER: _ClassVar[int]
    IS_TXN_FILE_FIELD_NUMBER: _ClassVar[int]
    primary_lock: bytes
    lock_version: int
    key: bytes
    lock_ttl: int
    txn_size: int
    lock_type: Op
    lock_for_update_ts: int
    use_async_commit: bool
    min_commit_ts: int
    secondaries: _containers.RepeatedScalarFieldContainer[bytes]
    duration_to_last_update_ms: int
    is_txn_file: bool
    def __init__(self, primary_lock: _Optional[bytes] = ..., lock_version: _Optional[int] = ..., key: _Optional[bytes] = ..., lock_ttl: _Optional[int] = ..., txn_size: _Optional[int] = ..., lock_type: _Optional[_Union[Op, str]] = ..., lock_for_update_ts: _Optional[int] = ..., use_async_commit: _Optional[bool] = ..., min_commit_ts: _Optional[int] = ..., secondaries: _Optional[_Iterable[bytes]] = ..., duration_to_last_update_ms: _Optional[int] = ..., is_txn_file: _Optional[bool] = ...) -> None: ...

class KeyError(_message.Message):
    __slots__ = ("locked", "retryable", "abort")
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    locked: LockInfo
    retryable: str
    abort: str
    def __init__(self, locked: _Optional[_Union[LockInfo, _Mapping]] = ..., retryable: _Optional[str] = ..., abort: _Optional[str] = ...) -> None: ...

class KvPair(_message.Message):
    __slots__ = ("error", "key", "value", "commit_ts")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    error: KeyError
    key: bytes
    value: bytes
    commit_ts: int
    def __init__(self, error: _Optional[_Union[KeyError, _Mapping]] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., commit_ts: _Optional[int] = ...) -> None: ...
