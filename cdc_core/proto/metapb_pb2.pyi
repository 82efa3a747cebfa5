from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PeerRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Voter: _ClassVar[PeerRole]
    Learner: _ClassVar[PeerRole]
    IncomingVoter: _ClassVar[PeerRole]
    DemotingVoter: _ClassVar[PeerRole]

class StoreState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Up: _ClassVar[StoreState]
    Offline: _ClassVar[StoreState]
    Tombstone: _ClassVar[StoreState]

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Preparing: _ClassVar[NodeState]
    Serving: _ClassVar[NodeState]
    Removing: _ClassVar[NodeState]
    Removed: _ClassVar[NodeState]
Voter: PeerRole
Learner: PeerRole
IncomingVoter: PeerRole
DemotingVoter: PeerRole
Up: StoreState
Offline: StoreState
Tombstone: StoreState
Preparing: NodeState
Serving: NodeState
Removing: NodeState
Removed: NodeState

class RegionEpoch(_message.Message):
    __slots__ = ("conf_ver", "version")
    CONF_VER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    conf_ver: int
    version: int
    def __init__(self, conf_ver: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class Peer(_message.Message):
    __slots__ = ("id", "store_id", "role", "is_witness")
    ID_FIELD_NUMBER: _ClassVar[int]
    STORE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    IS_WITNESS_FIELD_NUMBER: _ClassVar[int]
    id: int
    store_id: int
    role: PeerRole
    is_witness: bool
    def __init__(self, id: _Optional[int] = ..., store_id: _Optional[int] = ..., role: _Optional[_Union[PeerRole, str]] = ..., is_witness: _Optional[bool] = ...) -> None: ...

class Region(_message.Message):
    __slots__ = ("id", "start_key", "end_key", "region_epoch", "peers", "is_in_flashback", "flashback_start_ts")
    ID_FIELD_NUMBER: _ClassVar[int]
    START_KEY_FIELD_NUMBER: _ClassVar[int]
    END_KEY_FIELD_NUMBER: _ClassVar[int]
    REGION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    IS_IN_FLASHBACK_FIELD_NUMBER: _ClassVar[int]
    FLASHBACK_START_TS_FIELD_NUMBER: _ClassVar[int]
    id: int
    start_key: bytes
    end_key: bytes
    region_epoch: RegionEpoch
    peers: _containers.RepeatedCompositeFieldContainer[Peer]
    is_in_flashback: bool
    flashback_start_ts: int
    def __init__(self, id: _Optional[int] = ..., start_key: _Optional[bytes] = ..., end_key: _Optional[bytes] = ..., region_epoch: _Optional[_Union[RegionEpoch, _Mapping]] = ..., peers: _Optional[_Iterable[_Union[Peer, _Mapping]]] = ..., is_in_flashback: _Optional[bool] = ..., flashback_start_ts: _Optional[int] = ...) -> None: ...

class StoreLabel(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class Store(_message.Message):
    __slots__ = ("id", "address", "state", "labels", "version", "peer_address", "status_address", "git_hash", "start_timestamp", "deploy_path", "last_heartbeat", "physically_destroyed", "node_state")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    STATUS_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    GIT_HASH_FIELD_NUMBER: _ClassVar[int]
    START_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DEPLOY_PATH_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    PHYSICALLY_DESTROYED_FIELD_NUMBER: _ClassVar[int]
    NODE_STATE_FIELD_NUMBER: _ClassVar[int]
    id: int
    address: str
    state: StoreState
    labels: _containers.RepeatedCompositeFieldContainer[StoreLabel]
    version: str
    peer_address: str
    status_address: str
    git_hash: str
    start_timestamp: int
    deploy_path: str
    last_heartbeat: int
    physically_destroyed: bool
    node_state: NodeState
    def __init__(self, id: _Optional[int] = ..., address: _Optional[str] = ..., state: _Optional[_Union[StoreState, str]] = ..., labels: _Optional[_Iterable[_Union[StoreLabel, _Mapping]]] = ..., version: _Optional[str] = ..., peer_address: _Optional[str] = ..., status_address: _Optional[str] = ..., git_hash: _Optional[str] = ..., start_timestamp: _Optional[int] = ..., deploy_path: _Optional[str] = ..., last_heartbeat: _Optional[int] = ..., physically_destroyed: _Optional[bool] = ..., node_state: _Optional[_Union[NodeState, str]] = ...) -> None: ...
