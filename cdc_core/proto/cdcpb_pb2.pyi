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
Noop: ExtraOp
ReadOldValue: ExtraOp

class Header(_message.Message):
    __slots__ = ("cluster_id", "ticdc_version")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    TICDC_VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    ticdc_version: str
    def __init__(self, cluster_id: _Optional[int] = ..., ticdc_version: _Optional[str] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Deregister(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ChangeDataRequest(_message.Message):
    __slots__ = ("header", "region_id", "region_epoch", "checkpoint_ts", "start_key", "end_key", "request_id", "extra_op", "register", "deregister")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    REGION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_TS_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EXTRA_OP_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    DEREGISTER_FIELD_NUMBER: _ClassVar[int]
    header: Header
    region_id: int
    region_epoch: _metapb_pb2.RegionEpoch
    checkpoint_ts: int
    start_key: bytes
    end_key: bytes
    request_id: int
    extra_op: ExtraOp
    register: Register
    deregister: Deregister
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., region_id: _Optional[int] = ..., region_epoch: _Optional[_Union[_metapb_pb2.RegionEpoch, _Mapping]] = ..., checkpoint_ts: _Optional[int] = ..., start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ..., request_id: _Optional[int] = ..., extra_op: _Optional[_Union[ExtraOp, str]] = ..., register: _Optional[_Union[Register, _Mapping]] = ..., deregister: _Optional[_Union[Deregister, _Mapping]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("region_id", "request_id", "entries", "admin", "error")
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
        __slots__ = ("start_ts", "commit_ts", "type", "op_type", "key", "value", "old_value")
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
        OP_TYPE_FIELD_NUMBER: _ClassVar[int]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        OLD_VALUE_FIELD_NUMBER: _ClassVar[int]
        start_ts: int
        commit_ts: int
        type: Event.LogType
        op_type: Event.Row.OpType
        key: bytes
        value: bytes
        old_value: bytes
        def __init__(self, start_ts: _Optional[int] = ..., commit_ts: _Optional[int] = ..., type: _Optional[_Union[Event.LogType, str]] = ..., op_type: _Optional[_Union[Event.Row.OpType, str]] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., old_value: _Optional[bytes] = ...) -> None: ...
    class Entries(_message.Message):
        __slots__ = ("entries",)
        ENTRIES_FIELD_NUMBER: _ClassVar[int]
        entries: _containers.RepeatedCompositeFieldContainer[Event.Row]
        def __init__(self, entries: _Optional[_Iterable[_Union[Event.Row, _Mapping]]] = ...) -> None: ...
    class Admin(_message.Message):
        __slots__ = ("description",)
        DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
        description: str
        def __init__(self, description: _Optional[str] = ...) -> None: ...
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    request_id: int
    entries: Event.Entries
    admin: Event.Admin
    error: Error
    def __init__(self, region_id: _Optional[int] = ..., request_id: _Optional[int] = ..., entries: _Optional[_Union[Event.Entries, _Mapping]] = ..., admin: _Optional[_Union[Event.Admin, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class NotLeader(_message.Message):
    __slots__ = ("region_id", "leader")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    leader: _metapb_pb2.Peer
    def __init__(self, region_id: _Optional[int] = ..., leader: _Optional[_Union[_metapb_pb2.Peer, _Mapping]] = ...) -> None: ...

class RegionNotFound(_message.Message):
    __slots__ = ("region_id",)
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    def __init__(self, region_id: _Optional[int] = ...) -> None: ...

class EpochNotMatch(_message.Message):
    __slots__ = ("current_regions",)
    CURRENT_REGIONS_FIELD_NUMBER: _ClassVar[int]
    current_regions: _containers.RepeatedCompositeFieldContainer[_metapb_pb2.Region]
    def __init__(self, current_regions: _Optional[_Iterable[_Union[_metapb_pb2.Region, _Mapping]]] = ...) -> None: ...

class DuplicateRequest(_message.Message):
    __slots__ = ("region_id",)
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    def __init__(self, region_id: _Optional[int] = ...) -> None: ...

class ServerIsBusy(_message.Message):
    __slots__ = ("reason", "backoff_ms")
    REASON_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    reason: str
    backoff_ms: int
    def __init__(self, reason: _Optional[str] = ..., backoff_ms: _Optional[int] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("not_leader", "region_not_found", "epoch_not_match", "duplicate_request", "server_is_busy", "gc_safe_point_passed")
    NOT_LEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    EPOCH_NOT_MATCH_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    SERVER_IS_BUSY_FIELD_NUMBER: _ClassVar[int]
    GC_SAFE_POINT_PASSED_FIELD_NUMBER: _ClassVar[int]
    not_leader: NotLeader
    region_not_found: RegionNotFound
    epoch_not_match: EpochNotMatch
    duplicate_request: DuplicateRequest
    server_is_busy: ServerIsBusy
    gc_safe_point_passed: str
    def __init__(self, not_leader: _Optional[_Union[NotLeader, _Mapping]] = ..., region_not_found: _Optional[_Union[RegionNotFound, _Mapping]] = ..., epoch_not_match: _Optional[_Union[EpochNotMatch, _Mapping]] = ..., duplicate_request: _Optional[_Union[DuplicateRequest, _Mapping]] = ..., server_is_busy: _Optional[_Union[ServerIsBusy, _Mapping]] = ..., gc_safe_point_passed: _Optional[str] = ...) -> None: ...

class ResolvedTs(_message.Message):
    __slots__ = ("regions", "ts", "request_id")
    REGIONS_FIELD_NUMBER: _ClassVar[int]
    TS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    regions: _containers.RepeatedScalarFieldContainer[int]
    ts: int
    request_id: int
    def __init__(self, regions: _Optional[_Iterable[int]] = ..., ts: _Optional[int] = ..., request_id: _Optional[int] = ...) -> None: ...

class ChangeDataEvent(_message.Message):
    __slots__ = ("events", "resolved_ts")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_TS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    resolved_ts: ResolvedTs
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., resolved_ts: _Optional[_Union[ResolvedTs, _Mapping]] = ...) -> None: ...
