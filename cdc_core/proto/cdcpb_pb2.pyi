from cdc_core.proto import errorpb_pb2 as _errorpb_pb2
from cdc_core.proto import kvrpcpb_pb2 as _kvrpcpb_pb2
from cdc_core.proto import metapb_pb2 as _metapb_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScanPriority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCAN_PRIORITY_UNKNOWN: _ClassVar[ScanPriority]
    SCAN_PRIORITY_LOW: _ClassVar[ScanPriority]
    SCAN_PRIORITY_HIGH: _ClassVar[ScanPriority]
SCAN_PRIORITY_UNKNOWN: ScanPriority
SCAN_PRIORITY_LOW: ScanPriority
SCAN_PRIORITY_HIGH: ScanPriority

class Header(_message.Message):
    __slots__ = ("cluster_id", "ticdc_version")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    TICDC_VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    ticdc_version: str
    def __init__(self, cluster_id: _Optional[int] = ..., ticdc_version: _Optional[str] = ...) -> None: ...

class DuplicateRequest(_message.Message):
    __slots__ = ("region_id",)
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    def __init__(self, region_id: _Optional[int] = ...) -> None: ...

class Compatibility(_message.Message):
    __slots__ = ("required_version",)
    REQUIRED_VERSION_FIELD_NUMBER: _ClassVar[int]
    required_version: str
    def __init__(self, required_version: _Optional[str] = ...) -> None: ...

class ClusterIDMismatch(_message.Message):
    __slots__ = ("current", "request")
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    current: int
    request: int
    def __init__(self, current: _Optional[int] = ..., request: _Optional[int] = ...) -> None: ...

class Congested(_message.Message):
    __slots__ = ("region_id",)
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    def __init__(self, region_id: _Optional[int] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("not_leader", "region_not_found", "epoch_not_match", "duplicate_request", "compatibility", "cluster_id_mismatch", "server_is_busy", "congested")
    NOT_LEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    EPOCH_NOT_MATCH_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    COMPATIBILITY_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_MISMATCH_FIELD_NUMBER: _ClassVar[int]
    SERVER_IS_BUSY_FIELD_NUMBER: _ClassVar[int]
    CONGESTED_FIELD_NUMBER: _ClassVar[int]
    not_leader: _errorpb_pb2.NotLeader
    region_not_found: _errorpb_pb2.RegionNotFound
    epoch_not_match: _errorpb_pb2.EpochNotMatch
    duplicate_request: DuplicateRequest
    compatibility: Compatibility
    cluster_id_mismatch: ClusterIDMismatch
    server_is_busy: _errorpb_pb2.ServerIsBusy
    congested: Congested
    def __init__(self, not_leader: _Optional[_Union[_errorpb_pb2.NotLeader, _Mapping]] = ..., region_not_found: _Optional[_Union[_errorpb_pb2.RegionNotFound, _Mapping]] = ..., epoch_not_match: _Optional[_Union[_errorpb_pb2.EpochNotMatch, _Mapping]] = ..., duplicate_request: _Optional[_Union[DuplicateRequest, _Mapping]] = ..., compatibility: _Optional[_Union[Compatibility, _Mapping]] = ..., cluster_id_mismatch: _Optional[_Union[ClusterIDMismatch, _Mapping]] = ..., server_is_busy: _Optional[_Union[_errorpb_pb2.ServerIsBusy, _Mapping]] = ..., congested: _Optional[_Union[Congested, _Mapping]] = ...) -> None: ...

class TxnInfo(_message.Message):
    __slots__ = ("start_ts", "primary")
    START_TS_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    start_ts: int
    primary: bytes
    def __init__(self, start_ts: _Optional[int] = ..., primary: _Optional[bytes] = ...) -> None: ...

class TxnStatus(_message.Message):
    __slots__ = ("start_ts", "min_commit_ts", "commit_ts", "is_rolled_back")
    START_TS_FIELD_NUMBER: _ClassVar[int]
    MIN_COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    IS_ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    start_ts: int
    min_commit_ts: int
    commit_ts: int
    is_rolled_back: bool
    def __init__(self, start_ts: _Optional[int] = ..., min_commit_ts: _Optional[int] = ..., commit_ts: _Optional[int] = ..., is_rolled_back: _Optional[bool] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("region_id", "index", "request_id", "entries", "admin", "error", "resolved_ts", "long_txn")
    class LogType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[Event.LogType]
        PREWRITE: _ClassVar[Event.LogType]
        COMMIT: _ClassVar[Event.LogType]
        ROLLBACK: _ClassVar[Event.LogType]
        COMMITTED: _ClassVar[Event.LogType]
        INITIALIZED: _ClassVar[Event.LogType]
    UNKNOWN: Event.LogType
    PREWRITE: Event.LogType
    COMMIT: Event.LogType
    ROLLBACK: Event.LogType
    COMMITTED: Event.LogType
    INITIALIZED: Event.LogType
    class Row(_message.Message):
        __slots__ = ("start_ts", "commit_ts", "type", "generation", "op_type", "key", "value", "old_value", "expire_ts_unix_secs", "txn_source")
        class OpType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            UNKNOWN: _ClassVar[Event.Row.OpType]
            PUT: _ClassVar[Event.Row.OpType]
            DELETE: _ClassVar[Event.Row.OpType]
        UNKNOWN: Event.Row.OpType
        PUT: Event.Row.OpType
        DELETE: Event.Row.OpType
        START_TS_FIELD_NUMBER: _ClassVar[int]
        COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
        TYPE_FIELD_NUMBER: _ClassVar[int]
        GENERATION_FIELD_NUMBER: _ClassVar[int]
        OP_TYPE_FIELD_NUMBER: _ClassVar[int]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        OLD_VALUE_FIELD_NUMBER: _ClassVar[int]
        EXPIRE_TS_UNIX_SECS_FIELD_NUMBER: _ClassVar[int]
        TXN_SOURCE_FIELD_NUMBER: _ClassVar[int]
        start_ts: int
        commit_ts: int
        type: Event.LogType
        generation: int
        op_type: Event.Row.OpType
        key: bytes
        value: bytes
        old_value: bytes
        expire_ts_unix_secs: int
        txn_source: int
        def __init__(self, start_ts: _Optional[int] = ..., commit_ts: _Optional[int] = ..., type: _Optional[_Union[Event.LogType, str]] = ..., generation: _Optional[int] = ..., op_type: _Optional[_Union[Event.Row.OpType, str]] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., old_value: _Optional[bytes] = ..., expire_ts_unix_secs: _Optional[int] = ..., txn_source: _Optional[int] = ...) -> None: ...
    class Entries(_message.Message):
        __slots__ = ("entries",)
        ENTRIES_FIELD_NUMBER: _ClassVar[int]
        entries: _containers.RepeatedCompositeFieldContainer[Event.Row]
        def __init__(self, entries: _Optional[_Iterable[_Union[Event.Row, _Mapping]]] = ...) -> None: ...
    class Admin(_message.Message):
        __slots__ = ("admin_request", "admin_response")
        ADMIN_REQUEST_FIELD_NUMBER: _ClassVar[int]
        ADMIN_RESPONSE_FIELD_NUMBER: _ClassVar[int]
        admin_request: bytes
        admin_response: bytes
        def __init__(self, admin_request: _Optional[bytes] = ..., admin_response: _Optional[bytes] = ...) -> None: ...
    class LongTxn(_message.Message):
        __slots__ = ("txn_info",)
        TXN_INFO_FIELD_NUMBER: _ClassVar[int]
        txn_info: _containers.RepeatedCompositeFieldContainer[TxnInfo]
        def __init__(self, txn_info: _Optional[_Iterable[_Union[TxnInfo, _Mapping]]] = ...) -> None: ...
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_TS_FIELD_NUMBER: _ClassVar[int]
    LONG_TXN_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    index: int
    request_id: int
    entries: Event.Entries
    admin: Event.Admin
    error: Error
    resolved_ts: int
    long_txn: Event.LongTxn
    def __init__(self, region_id: _Optional[int] = ..., index: _Optional[int] = ..., request_id: _Optional[int] = ..., entries: _Optional[_Union[Event.Entries, _Mapping]] = ..., admin: _Optional[_Union[Event.Admin, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., resolved_ts: _Optional[int] = ..., long_txn: _Optional[_Union[Event.LongTxn, _Mapping]] = ...) -> None: ...

class ChangeDataEvent(_message.Message):
    __slots__ = ("events", "resolved_ts")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_TS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    resolved_ts: ResolvedTs
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., resolved_ts: _Optional[_Union[ResolvedTs, _Mapping]] = ...) -> None: ...

class ResolvedTs(_message.Message):
    __slots__ = ("regions", "ts", "request_id")
    REGIONS_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    regions: _containers.RepeatedScalarFieldContainer[int]
    ts: int
    request_id: int
    def __init__(self, regions: _Optional[_Iterable[int]] = ..., ts: _Optional[int] = ..., request_id: _Optional[int] = ...) -> None: ...

class ChangeDataRequest(_message.Message):
    __slots__ = ("header", "region_id", "region_epoch", "checkpoint_ts", "start_key", "end_key", "request_id", "extra_op", "register", "notify_txn_status", "deregister", "kv_api", "filter_loop", "scan_priority")
    class KvAPI(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TiDB: _ClassVar[ChangeDataRequest.KvAPI]
        RawKV: _ClassVar[ChangeDataRequest.KvAPI]
        TxnKV: _ClassVar[ChangeDataRequest.KvAPI]
    TiDB: ChangeDataRequest.KvAPI
    RawKV: ChangeDataRequest.KvAPI
    TxnKV: ChangeDataRequest.KvAPI
    class Register(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Deregister(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class NotifyTxnStatus(_message.Message):
        __slots__ = ("txn_status",)
        TXN_STATUS_FIELD_NUMBER: _ClassVar[int]
        txn_status: _containers.RepeatedCompositeFieldContainer[TxnStatus]
        def __init__(self, txn_status: _Optional[_Iterable[_Union[TxnStatus, _Mapping]]] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    REGION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_TS_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXTRA_OP_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_TXN_STATUS_FIELD_NUMBER: _ClassVar[int]
    DEREGISTER_FIELD_NUMBER: _ClassVar[int]
    KV_API_FIELD_NUMBER: _ClassVar[int]
    FILTER_LOOP_FIELD_NUMBER: _ClassVar[int]
    SCAN_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    header: Header
    region_id: int
    region_epoch: _metapb_pb2.RegionEpoch
    checkpoint_ts: int
    start_key: bytes
    end_key: bytes
    request_id: int
    extra_op: _kvrpcpb_pb2.ExtraOp
    register: ChangeDataRequest.Register
    notify_txn_status: ChangeDataRequest.NotifyTxnStatus
    deregister: ChangeDataRequest.Deregister
    kv_api: ChangeDataRequest.KvAPI
    filter_loop: bool
    scan_priority: ScanPriority
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., region_id: _Optional[int] = ..., region_epoch: _Optional[_Union[_metapb_pb2.RegionEpoch, _Mapping]] = ..., checkpoint_ts: _Optional[int] = ..., start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ..., request_id: _Optional[int] = ..., extra_op: _Optional[_Union[_kvrpcpb_pb2.ExtraOp, str]] = ..., register: _Optional[_Union[ChangeDataRequest.Register, _Mapping]] = ..., notify_txn_status: _Optional[_Union[ChangeDataRequest.NotifyTxnStatus, _Mapping]] = ..., deregister: _Optional[_Union[ChangeDataRequest.Deregister, _Mapping]] = ..., kv_api: _Optional[_Union[ChangeDataRequest.KvAPI, str]] = ..., filter_loop: _Optional[bool] = ..., scan_priority: _Optional[_Union[ScanPriority, str]] = ...) -> None: ...
