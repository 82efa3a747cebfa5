from cdc_core.proto import metapb_pb2 as _metapb_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TableRef(_message.Message):
    __slots__ = ("db", "table")
    DB_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    db: str
    table: str
    def __init__(self, db: _Optional[str] = ..., table: _Optional[str] = ...) -> None: ...

class SplitRequest(_message.Message):
    __slots__ = ("region_id", "keys", "table", "handles", "lo", "hi", "regions")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    HANDLES_FIELD_NUMBER: _ClassVar[int]
    LO_FIELD_NUMBER: _ClassVar[int]
    HI_FIELD_NUMBER: _ClassVar[int]
    REGIONS_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    table: TableRef
    handles: _containers.RepeatedScalarFieldContainer[int]
    lo: int
    hi: int
    regions: int
    def __init__(self, region_id: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ..., table: _Optional[_Union[TableRef, _Mapping]] = ..., handles: _Optional[_Iterable[int]] = ..., lo: _Optional[int] = ..., hi: _Optional[int] = ..., regions: _Optional[int] = ...) -> None: ...

class RegionInfo(_message.Message):
    __slots__ = ("region", "leader_store_id")
    REGION_FIELD_NUMBER: _ClassVar[int]
    LEADER_STORE_ID_FIELD_NUMBER: _ClassVar[int]
    region: _metapb_pb2.Region
    leader_store_id: int
    def __init__(self, region: _Optional[_Union[_metapb_pb2.Region, _Mapping]] = ..., leader_store_id: _Optional[int] = ...) -> None: ...

class RegionsResponse(_message.Message):
    __slots__ = ("regions",)
    REGIONS_FIELD_NUMBER: _ClassVar[int]
    regions: _containers.RepeatedCompositeFieldContainer[RegionInfo]
    def __init__(self, regions: _Optional[_Iterable[_Union[RegionInfo, _Mapping]]] = ...) -> None: ...

class MergeRequest(_message.Message):
    __slots__ = ("region_id", "target_region_id", "table")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_REGION_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    target_region_id: int
    table: TableRef
    def __init__(self, region_id: _Optional[int] = ..., target_region_id: _Optional[int] = ..., table: _Optional[_Union[TableRef, _Mapping]] = ...) -> None: ...

class TransferLeaderRequest(_message.Message):
    __slots__ = ("region_id", "table", "to_store_id")
    REGION_ID_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    TO_STORE_ID_FIELD_NUMBER: _ClassVar[int]
    region_id: int
    table: TableRef
    to_store_id: int
    def __init__(self, region_id: _Optional[int] = ..., table: _Optional[_Union[TableRef, _Mapping]] = ..., to_store_id: _Optional[int] = ...) -> None: ...

class StoreRequest(_message.Message):
    __slots__ = ("store_id", "move_leaders")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    MOVE_LEADERS_FIELD_NUMBER: _ClassVar[int]
    store_id: int
    move_leaders: bool
    def __init__(self, store_id: _Optional[int] = ..., move_leaders: _Optional[bool] = ...) -> None: ...

class StoreResponse(_message.Message):
    __slots__ = ("store_id", "up", "streams_dropped", "leaders_moved")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    UP_FIELD_NUMBER: _ClassVar[int]
    STREAMS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    LEADERS_MOVED_FIELD_NUMBER: _ClassVar[int]
    store_id: int
    up: bool
    streams_dropped: int
    leaders_moved: int
    def __init__(self, store_id: _Optional[int] = ..., up: _Optional[bool] = ..., streams_dropped: _Optional[int] = ..., leaders_moved: _Optional[int] = ...) -> None: ...

class DropStreamsRequest(_message.Message):
    __slots__ = ("store_id",)
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    store_id: int
    def __init__(self, store_id: _Optional[int] = ...) -> None: ...

class DropStreamsResponse(_message.Message):
    __slots__ = ("streams_dropped",)
    STREAMS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    streams_dropped: int
    def __init__(self, streams_dropped: _Optional[int] = ...) -> None: ...

class HoldLockRequest(_message.Message):
    __slots__ = ("table", "handles", "count")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    HANDLES_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    table: TableRef
    handles: _containers.RepeatedScalarFieldContainer[int]
    count: int
    def __init__(self, table: _Optional[_Union[TableRef, _Mapping]] = ..., handles: _Optional[_Iterable[int]] = ..., count: _Optional[int] = ...) -> None: ...

class HoldLockResponse(_message.Message):
    __slots__ = ("start_ts", "keys")
    START_TS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    start_ts: int
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, start_ts: _Optional[int] = ..., keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ReleaseLockRequest(_message.Message):
    __slots__ = ("start_ts", "rollback")
    START_TS_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    start_ts: int
    rollback: bool
    def __init__(self, start_ts: _Optional[int] = ..., rollback: _Optional[bool] = ...) -> None: ...

class ReleaseLockResponse(_message.Message):
    __slots__ = ("commit_ts", "keys")
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    commit_ts: int
    keys: int
    def __init__(self, commit_ts: _Optional[int] = ..., keys: _Optional[int] = ...) -> None: ...

class BusyRequest(_message.Message):
    __slots__ = ("store_id", "duration_ms")
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    store_id: int
    duration_ms: int
    def __init__(self, store_id: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class BusyResponse(_message.Message):
    __slots__ = ("store_id",)
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    store_id: int
    def __init__(self, store_id: _Optional[int] = ...) -> None: ...

class PdLeaderRequest(_message.Message):
    __slots__ = ("member_id",)
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    member_id: int
    def __init__(self, member_id: _Optional[int] = ...) -> None: ...

class PdLeaderResponse(_message.Message):
    __slots__ = ("member_id", "address")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    member_id: int
    address: str
    def __init__(self, member_id: _Optional[int] = ..., address: _Optional[str] = ...) -> None: ...

class GcRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GcResponse(_message.Message):
    __slots__ = ("safe_point", "versions_removed", "keys_removed")
    SAFE_POINT_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    KEYS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    safe_point: int
    versions_removed: int
    keys_removed: int
    def __init__(self, safe_point: _Optional[int] = ..., versions_removed: _Optional[int] = ..., keys_removed: _Optional[int] = ...) -> None: ...
