from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ExtraOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Noop: _ClassVar[ExtraOp]
    ReadOldValue: _ClassVar[ExtraOp]
Noop: ExtraOp
ReadOldValue: ExtraOp
