from cdc_core.proto import metapb_pb2 as _metapb_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RequestHeader(_message.Message):
    __slots__ = ("cluster_id",)
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    def __init__(self, cluster_id: _Optional[int] = ...) -> None: ...

class ResponseHeader(_message.Message):
    __slots__ = ("cluster_id", "error")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    error: Error
    def __init__(self, cluster_id: _Optional[int] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class Timestamp(_message.Message):
    __slots__ = ("physical", "logical")
    PHYSICAL_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_FIELD_NUMBER: _ClassVar[int]
    physical: int
    logical: int
    def __init__(self, physical: _Optional[int] = ..., logical: _Optional[int] = ...) -> None: ...

class GetTSRequest(_message.Message):
    __slots__ = ("header", "count")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    count: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., count: _Optional[int] = ...) -> None: ...

class GetTSResponse(_message.Message):
    __slots__ = ("header", "timestamp", "count")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    timestamp: Timestamp
    count: int
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., timestamp: _Optional[_Union[Timestamp, _Mapping]] = ..., count: _Optional[int] = ...) -> None: ...

class GetRegionRequest(_message.Message):
    __slots__ = ("header", "region_key")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_KEY_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    region_key: bytes
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., region_key: _Optional[bytes] = ...) -> None: ...

class GetRegionResponse(_message.Message):
    __slots__ = ("header", "region", "leader")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    region: _metapb_pb2.Region
    leader: _metapb_pb2.Peer
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., region: _Optional[_Union[_metapb_pb2.Region, _Mapping]] = ..., leader: _Optional[_Union[_metapb_pb2.Peer, _Mapping]] = ...) -> None: ...

class ScanRegionsRequest(_message.Message):
    __slots__ = ("header", "start_key", "end_key", "limit")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    start_key: bytes
    end_key: bytes
    limit: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ..., limit: _Optional[int] = ...) -> None: ...

class RegionWithLeader(_message.Message):
    __slots__ = ("region", "leader")
    REGION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    region: _metapb_pb2.Region
    leader: _metapb_pb2.Peer
    def __init__(self, region: _Optional[_Union[_metapb_pb2.Region, _Mapping]] = ..., leader: _Optional[_Union[_metapb_pb2.Peer, _Mapping]] = ...) -> None: ...

class ScanRegionsResponse(_message.Message):
    __slots__ = ("header", "regions")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REGIONS_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    regions: _containers.RepeatedCompositeFieldContainer[RegionWithLeader]
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., regions: _Optional[_Iterable[_Union[RegionWithLeader, _Mapping]]] = ...) -> None: ...

class GetStoreRequest(_message.Message):
    __slots__ = ("header", "store_id")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    store_id: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., store_id: _Optional[int] = ...) -> None: ...

class GetStoreResponse(_message.Message):
    __slots__ = ("header", "store")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    store: _metapb_pb2.Store
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., store: _Optional[_Union[_metapb_pb2.Store, _Mapping]] = ...) -> None: ...

class GetAllStoresRequest(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ...) -> None: ...

class GetAllStoresResponse(_message.Message):
    __slots__ = ("header", "stores")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    STORES_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    stores: _containers.RepeatedCompositeFieldContainer[_metapb_pb2.Store]
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., stores: _Optional[_Iterable[_Union[_metapb_pb2.Store, _Mapping]]] = ...) -> None: ...

class UpdateServiceGCSafePointRequest(_message.Message):
    __slots__ = ("header", "service_id", "ttl", "safe_point")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SERVICE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    SAFE_POINT_FIELD_NUMBER: _ClassVar[int]
    header: RequestHeader
    service_id: str
    ttl: int
    safe_point: int
    def __init__(self, header: _Optional[_Union[RequestHeader, _Mapping]] = ..., service_id: _Optional[str] = ..., ttl: _Optional[int] = ..., safe_point: _Optional[int] = ...) -> None: ...

class UpdateServiceGCSafePointResponse(_message.Message):
    __slots__ = ("header", "service_id", "ttl", "min_safe_point")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SERVICE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    MIN_SAFE_POINT_FIELD_NUMBER: _ClassVar[int]
    header: ResponseHeader
    service_id: str
    ttl: int
    min_safe_point: int
    def __init__(self, header: _Optional[_Union[ResponseHeader, _Mapping]] = ..., service_id: _Optional[str] = ..., ttl: _Optional[int] = ..., min_safe_point: _Optional[int] = ...) -> None: ...
