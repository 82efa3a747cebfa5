"""MySQL/TiDB column type facts the row codec needs: type codes, column flags and a small ``FieldType``.

The numbers are TiDB's own (``pkg/parser/mysql/type.go``: the ``Type*`` byte codes and, in the same file, the
``*Flag`` column flags) and MySQL's protocol values, so a schema read from TiDB's ``information_schema`` or from a
DDL job carries them unchanged. ``FieldType`` keeps only what decoding a row value depends on (TiDB's
``types.FieldType`` holds more).
"""

from __future__ import annotations

from dataclasses import dataclass

# --- type codes (pkg/parser/mysql/type.go) ---------------------------------------------------------------------
TypeUnspecified = 0
TypeTiny = 1  # TINYINT
TypeShort = 2  # SMALLINT
TypeLong = 3  # INT
TypeFloat = 4
TypeDouble = 5
TypeNull = 6
TypeTimestamp = 7
TypeLonglong = 8  # BIGINT
TypeInt24 = 9  # MEDIUMINT
TypeDate = 10
TypeDuration = 11  # TIME; TiDB renamed it to avoid Go's time.Time
TypeDatetime = 12
TypeYear = 13
TypeNewDate = 14
TypeVarchar = 15
TypeBit = 16
TypeTiDBVectorFloat32 = 0xE1
TypeJSON = 0xF5
TypeNewDecimal = 0xF6
TypeEnum = 0xF7
TypeSet = 0xF8
TypeTinyBlob = 0xF9
TypeMediumBlob = 0xFA
TypeLongBlob = 0xFB
TypeBlob = 0xFC
TypeVarString = 0xFD
TypeString = 0xFE  # CHAR / BINARY
TypeGeometry = 0xFF

# --- column flags (pkg/parser/mysql/type.go, "Flag information") ----------------------------------------------
NotNullFlag = 1 << 0
PriKeyFlag = 1 << 1
UniqueKeyFlag = 1 << 2
MultipleKeyFlag = 1 << 3
BlobFlag = 1 << 4
UnsignedFlag = 1 << 5
ZerofillFlag = 1 << 6
BinaryFlag = 1 << 7
EnumFlag = 1 << 8
AutoIncrementFlag = 1 << 9
TimestampFlag = 1 << 10
SetFlag = 1 << 11
NoDefaultValueFlag = 1 << 12
OnUpdateNowFlag = 1 << 13

UnspecifiedLength = -1  # TiDB's types.UnspecifiedLength: flen/decimal not given

INTEGER_TYPES = frozenset({TypeTiny, TypeShort, TypeInt24, TypeLong, TypeLonglong})
STRING_TYPES = frozenset(
    {TypeVarchar, TypeVarString, TypeString, TypeTinyBlob, TypeMediumBlob, TypeLongBlob, TypeBlob}
)
TIME_TYPES = frozenset({TypeDate, TypeDatetime, TypeTimestamp, TypeNewDate})

_TYPE_NAMES = {
    value: name
    for name, value in globals().items()
    if name.startswith("Type") and isinstance(value, int)
}


def type_name(tp: int) -> str:
    """TiDB's constant name for a type code, e.g. ``type_name(8) == "TypeLonglong"`` (for error messages)."""
    return _TYPE_NAMES.get(tp, f"type {tp}")


@dataclass(frozen=True)
class FieldType:
    """The part of a column's type that row values are encoded by.

    ``tp`` is a ``Type*`` code, ``flag`` an OR of ``*Flag`` bits (only ``UnsignedFlag`` and ``BinaryFlag`` matter
    here), ``flen``/``decimal`` the declared length and scale (``-1`` when unspecified; DECIMAL uses them as
    precision and frac), ``charset``/``collate`` the string charset and collation, ``elems`` the ENUM/SET members.
    """

    tp: int
    flag: int = 0
    flen: int = UnspecifiedLength
    decimal: int = UnspecifiedLength
    charset: str = ""
    collate: str = ""
    elems: tuple[str, ...] = ()

    @property
    def unsigned(self) -> bool:
        """Whether ``UnsignedFlag`` is set (an unsigned integer column)."""
        return bool(self.flag & UnsignedFlag)

    @property
    def binary(self) -> bool:
        """Whether a string column holds bytes rather than text (BINARY, VARBINARY, BLOB).

        TiDB gives such columns the ``binary`` charset and collation; the collation decides when set, then the
        charset, then ``BinaryFlag`` (a bare type with neither)."""
        if self.collate:
            return self.collate == "binary"
        if self.charset:
            return self.charset == "binary"
        return bool(self.flag & BinaryFlag)
