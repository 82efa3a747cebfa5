from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StoreState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Up: _ClassVar[StoreState]
    Offline: _ClassVar[StoreState]
    Tombstone: _ClassVar[StoreState]
Up: StoreState
Offline: StoreState
Tombstone: StoreState

class RegionEpoch(_message.Message):
    __slots__ = ("conf_ver", "version")
    CONF_VER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    conf_ver: int
    version: int
    def __init__(self, conf_ver: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class Peer(_message.Message):
    __slots__ = ("id", "store_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    store_id: int
    def __init__(self, id: _Optional[int] = ..., store_id: _Optional[int] = ...) -> None: ...

class Region(_message.Message):
    __slots__ = ("id", "start_key", "end_key", "region_epoch", "peers")
    ID_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    REGION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    id: int
    start_key: bytes
    end_key: bytes
    region_epoch: RegionEpoch
    peers: _containers.RepeatedCompositeFieldContainer[Peer]
    def __init__(self, id: _Optional[int] = ..., start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ..., region_epoch: _Optional[_Union[RegionEpoch, _Mapping]] = ..., peers: _Optional[_Iterable[_Union[Peer, _Mapping]]] = ...) -> None: ...

class Store(_message.Message):
    __slots__ = ("id", "address", "state")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    id: int
    address: str
    state: StoreState
    def __init__(self, id: _Optional[int] = ..., address: _Optional[str] = ..., state: _Optional[_Union[StoreState, str]] = ...) -> None: ...
