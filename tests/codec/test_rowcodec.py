"""TiDB's row formats (rowcodec v2 and the datum row) against TiDB's and TiKV's own vectors, then round trips over
every type, both layouts and NULLs, and corrupt input.

Sources of the vectors (each block below names its test):
* TiKV ``components/tidb_query_datatype/src/codec/row/v2/encoder_for_test.rs`` (literal row bytes) and
  ``row_slice.rs`` (value spans of small, big and checksummed rows);
* TiDB ``pkg/util/rowcodec/rowcodec_test.go`` (decoded outputs, layout switches);
* TiDB ``pkg/types/mydecimal.go`` (the ``ToBin`` doc example) and ``pkg/types/mydecimal_test.go``
  (``TestToBinFromBin``);
* TiDB ``pkg/util/rowcodec/row.go`` and ``encoder.go`` (the checksum trailer and how it is computed).
"""

from __future__ import annotations

import datetime as dt
import struct
import zlib
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_core.codec import mysql_type as mt
from cdc_core.codec import rowcodec as rc
from cdc_core.codec.mysql_type import FieldType
from cdc_core.codec.vector import VectorFloat32

# --- column types used below -------------------------------------------------------------------------------------

LONGLONG = FieldType(mt.TypeLonglong)
ULONGLONG = FieldType(mt.TypeLonglong, flag=mt.UnsignedFlag)
SHORT = FieldType(mt.TypeShort)
LONG = FieldType(mt.TypeLong)
DOUBLE = FieldType(mt.TypeDouble)
FLOAT = FieldType(mt.TypeFloat)
TEXT = FieldType(mt.TypeVarchar, charset="utf8mb4", collate="utf8mb4_bin")
BLOB = FieldType(mt.TypeBlob, flag=mt.BinaryFlag, charset="binary", collate="binary")
DATE = FieldType(mt.TypeDate)
DATETIME = FieldType(mt.TypeDatetime, decimal=6)
TIMESTAMP = FieldType(mt.TypeTimestamp, decimal=6)
DURATION = FieldType(mt.TypeDuration, decimal=6)
DECIMAL = FieldType(mt.TypeNewDecimal)
JSON = FieldType(mt.TypeJSON)
NULLTYPE = FieldType(mt.TypeNull)


def schema_of(cols: list[tuple[int, FieldType, Any]]) -> dict[int, FieldType]:
    return {cid: ft for cid, ft, _ in cols}


def values_of(cols: list[tuple[int, FieldType, Any]]) -> dict[int, Any]:
    return {cid: value for cid, _, value in cols}


def spans(data: bytes) -> dict[int, tuple[int, int]]:
    row = rc.parse_row_v2(data)
    starts = (0, *row.offsets[:-1])
    return dict(zip(row.not_null_ids, zip(starts, row.offsets, strict=True), strict=True))


def test_mysql_type_codes_and_flags() -> None:
    # TiDB pkg/parser/mysql/type.go
    assert (mt.TypeTiny, mt.TypeLonglong, mt.TypeDuration, mt.TypeBit) == (1, 8, 11, 16)
    assert (mt.TypeJSON, mt.TypeNewDecimal, mt.TypeString, mt.TypeGeometry) == (0xF5, 0xF6, 0xFE, 0xFF)
    assert (mt.NotNullFlag, mt.PriKeyFlag, mt.UniqueKeyFlag, mt.UnsignedFlag, mt.BinaryFlag) == (1, 2, 4, 32, 128)
    assert ULONGLONG.unsigned and not LONGLONG.unsigned
    assert BLOB.binary and not TEXT.binary and FieldType(mt.TypeBlob, flag=mt.BinaryFlag).binary
    assert mt.type_name(mt.TypeLonglong) == "TypeLonglong"


# --- TiKV encoder_for_test.rs: literal v2 rows ------------------------------------------------------------------

# TiKV components/tidb_query_datatype/src/codec/row/v2/encoder_for_test.rs, test_encode_unsigned
TIKV_UNSIGNED = bytes([128, 0, 2, 0, 0, 0, 1, 2, 8, 0, 9, 0, 255, 255, 255, 255, 255, 255, 255, 255, 255])

# TiKV encoder_for_test.rs, test_encode
TIKV_SMALL = bytes([
    128, 0, 11, 0, 1, 0, 1, 3, 6, 7, 8, 9, 12, 13, 14, 15, 16, 33, 2, 0, 3, 0, 11, 0, 14,
    0, 16, 0, 24, 0, 25, 0, 33, 0, 36, 0, 65, 0, 69, 0, 232, 3, 3, 64, 3, 51, 51, 51, 51,
    51, 50, 97, 98, 99, 255, 127, 191, 252, 204, 204, 204, 204, 204, 205, 2, 0, 0, 0, 135,
    51, 230, 158, 25, 1, 0, 129, 1, 1, 0, 0, 0, 28, 0, 0, 0, 19, 0, 0, 0, 3, 0, 12, 22, 0,
    0, 0, 107, 101, 121, 5, 118, 97, 108, 117, 101, 0, 202, 154, 59,
])
TIKV_SMALL_COLS: list[tuple[int, FieldType, Any]] = [
    (1, LONGLONG, 1000),
    (12, LONGLONG, 2),
    (33, LONGLONG, None),
    (3, ULONGLONG, 3),
    (8, LONGLONG, 32767),
    (7, BLOB, b"abc"),
    (9, DOUBLE, 1.8),
    (6, DOUBLE, -1.8),
    (13, FieldType(mt.TypeDatetime), dt.datetime(2018, 1, 19, 3, 14, 7)),
    (14, DECIMAL, Decimal(1)),  # unspecified precision: PrecisionAndFrac gives (1, 0) -> 1, 0, 0x81
    (15, JSON, {"key": "value"}),
    (16, FieldType(mt.TypeDuration), dt.timedelta(seconds=1)),
]

# TiKV encoder_for_test.rs, test_encode_big
TIKV_BIG = bytes([
    128, 1, 4, 0, 1, 0, 1, 0, 0, 0, 3, 0, 0, 0, 8, 0, 0, 0, 12, 0, 0, 0, 79, 1, 0, 0, 2, 0,
    0, 0, 3, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0, 232, 3, 3, 255, 127, 2,
])
TIKV_BIG_COLS: list[tuple[int, FieldType, Any]] = [
    (1, LONGLONG, 1000), (12, LONGLONG, 2), (335, LONGLONG, None), (3, LONGLONG, 3), (8, LONGLONG, 32767),
]


@pytest.mark.parametrize(
    ("cols", "encoded"),
    [
        ([(1, ULONGLONG, (1 << 64) - 1), (2, LONGLONG, -1)], TIKV_UNSIGNED),
        (TIKV_SMALL_COLS, TIKV_SMALL),
        (TIKV_BIG_COLS, TIKV_BIG),
    ],
    ids=["test_encode_unsigned", "test_encode", "test_encode_big"],
)
def test_tikv_encoder_vectors(cols: list[tuple[int, FieldType, Any]], encoded: bytes) -> None:
    assert rc.encode_row_v2(cols) == encoded
    assert rc.decode_row(encoded, schema_of(cols)) == values_of(cols)


def test_tikv_vector_pieces() -> None:
    """Pieces of TiKV's test_encode row, checked against the encoders that produced them."""
    assert rc.encode_float(1.8) == bytes([191, 252, 204, 204, 204, 204, 204, 205])
    assert rc.encode_float(-1.8) == bytes([64, 3, 51, 51, 51, 51, 51, 50])
    assert rc.encode_compact_uint(rc.pack_time(2018, 1, 19, 3, 14, 7)) == bytes([0, 0, 0, 135, 51, 230, 158, 25])
    assert rc.encode_decimal(Decimal(1)) == bytes([1, 0, 129])
    assert rc.encode_json({"key": "value"}) == TIKV_SMALL[-33:-4]
    assert rc.decode_json(TIKV_SMALL[-33:-4]) == {"key": "value"}
    assert rc.encode_compact_int(1_000_000_000) == bytes([0, 202, 154, 59])


def test_tikv_row_slice_spans() -> None:
    # TiKV row/v2/row_slice.rs, test_search_in_non_null_ids: encoded_data_big() and encoded_data()
    big = rc.encode_row_v2([(1, LONGLONG, 1000), (356, LONGLONG, 2), (33, LONGLONG, None), (3, LONGLONG, 3),
                            (64123, LONGLONG, 5)])
    row = rc.parse_row_v2(big)
    assert row.large and row.null_ids == (33,)
    assert spans(big) == {1: (0, 2), 3: (2, 3), 356: (3, 4), 64123: (4, 5)}
    small = rc.encode_row_v2([(1, LONGLONG, 1000), (33, LONGLONG, None), (3, LONGLONG, 3)])
    assert not rc.parse_row_v2(small).large
    assert spans(small) == {1: (0, 2), 3: (2, 3)}
    assert rc.parse_row_v2(small).value(33) is None
    assert rc.parse_row_v2(small).value(1) == bytes([232, 3])
    with pytest.raises(KeyError):
        rc.parse_row_v2(small).value(2)


def _with_checksum(row: bytes, handle: bytes, version: int, extra: int | None) -> bytes:
    """TiDB encoder.go RawChecksum / row.go CalculateRawChecksum: set the checksum flag, append the header
    (version, bit 3 for an extra checksum), CRC32 over those bytes and the handle, then the extra CRC32."""
    flagged = bytes([row[0], row[1] | rc.ROW_FLAG_CHECKSUM]) + row[2:]
    header = version | (rc.CHECKSUM_FLAG_EXTRA if extra is not None else 0)
    body = flagged + bytes([header])
    crc = zlib.crc32(handle, zlib.crc32(body))
    return body + struct.pack("<I", crc) + (struct.pack("<I", extra) if extra is not None else b"")


@pytest.mark.parametrize("null_id", [235, 355])
@pytest.mark.parametrize("extra", [None, 37217])
def test_tikv_decode_with_checksum(null_id: int, extra: int | None) -> None:
    # TiKV row/v2/row_slice.rs, test_decode_with_checksum: same columns, spans and extra checksum 37217
    cols: list[tuple[int, FieldType, Any]] = [
        (1, SHORT, 1000),
        (12, LONG, 2),
        (null_id, SHORT, None),
        (3, FLOAT, 3.55),
        (8, TEXT, "abc"),
        (17, FieldType(mt.TypeDuration, decimal=2), dt.timedelta(milliseconds=34)),
    ]
    handle = struct.pack(">Q", 1 ^ (1 << 63))  # kv.IntHandle(1).Encoded(): codec.EncodeInt
    data = _with_checksum(rc.encode_row_v2(cols), handle, 2, extra)
    row = rc.parse_row_v2(data)
    assert row.large == (null_id > 255)
    assert spans(data) == {1: (0, 2), 3: (2, 10), 8: (10, 13), 12: (13, 14), 17: (14, 18)}
    assert row.null_ids == (null_id,)
    expected_crc = zlib.crc32(handle, zlib.crc32(data[:len(data) - 4 - (4 if extra is not None else 0)]))
    assert row.checksum == rc.RowChecksum(2, expected_crc, extra)
    assert rc.row_checksum(data) == row.checksum
    decoded = rc.decode_row(data, schema_of(cols))
    assert decoded == {**values_of(cols), 3: struct.unpack("<f", struct.pack("<f", 3.55))[0]}


def test_no_checksum() -> None:
    assert rc.parse_row_v2(TIKV_SMALL).checksum is None
    assert rc.row_checksum(TIKV_SMALL) is None
    assert rc.row_checksum(rc.encode_row_datum([(1, LONGLONG, 1)])) is None


# --- TiDB rowcodec_test.go --------------------------------------------------------------------------------------


def tidb_types_new_row_codec_cols() -> list[tuple[int, FieldType, Any]]:
    """TiDB pkg/util/rowcodec/rowcodec_test.go, TestTypesNewRowCodec: smallTestDataList."""
    return [
        (1, LONGLONG, 1),
        (22, FieldType(mt.TypeShort, flag=mt.UnsignedFlag), 1),
        (3, DOUBLE, 2.0),
        (24, FieldType(mt.TypeBlob, collate="utf8mb4_bin"), "abc"),
        (25, FieldType(mt.TypeString, collate="utf8mb4_bin"), "ab"),
        (5, TIMESTAMP, dt.datetime(2011, 11, 10, 11, 11, 11, 999999)),
        (16, FieldType(mt.TypeDuration, decimal=0), dt.timedelta(hours=4)),
        (8, FieldType(mt.TypeNewDecimal, flen=6, decimal=4), Decimal("11.9900")),
        (12, FieldType(mt.TypeYear), 1999),
        (9, FieldType(mt.TypeEnum, collate="utf8mb4_bin", elems=("y", "n")), 2),
        (14, JSON, {"a": 2}),
        (11, NULLTYPE, None),
        (2, NULLTYPE, None),
        (100, NULLTYPE, None),
        (116, FLOAT, 6.0),
        (117, FieldType(mt.TypeSet, collate="utf8mb4_bin", elems=("n1", "n2")), 1),
        (118, FieldType(mt.TypeBit, flen=24), 3223600),
        (119, FieldType(mt.TypeVarString, collate="utf8mb4_bin"), ""),
    ]


@pytest.mark.parametrize("variant", ["small", "largeColID", "largeData"])
def test_tidb_types_new_row_codec(variant: str) -> None:
    cols = tidb_types_new_row_codec_cols()
    if variant == "largeColID":
        cols[0] = (300, *cols[0][1:])
    if variant == "largeData":
        cols[3] = (24, cols[3][1], "a" * 65536)  # strings.Repeat("a", math.MaxUint16+1)
    data = rc.encode_row_v2(cols)
    assert rc.parse_row_v2(data).large == (variant != "small")
    assert rc.decode_row(data, schema_of(cols)) == values_of(cols)
    assert rc.decode_row(rc.encode_row_datum(cols), schema_of(cols)) == values_of(cols)
    # The test's expected datums after the v2 -> old-bytes conversion: the stored numbers.
    row = rc.parse_row_v2(data)
    assert row.value(5) == rc.encode_compact_uint(1840446893366133311)  # the TIMESTAMP's packed uint
    assert rc.pack_time(2011, 11, 10, 11, 11, 11, 999999) == 1840446893366133311
    assert row.value(16) == rc.encode_compact_int(14400000000000)  # "4:00:00" in nanoseconds
    assert row.value(118) == rc.encode_compact_uint(3223600)
    assert row.value(9) == bytes([2]) and row.value(117) == bytes([1])
    assert row.value(8)[:2] == bytes([6, 4])  # withLen(6), withFrac(4)


def test_tidb_65535_bug() -> None:
    # TiDB rowcodec_test.go, Test65535Bug: 65535 bytes of values still fit the small layout
    ft = FieldType(mt.TypeString, collate="utf8mb4_bin")
    data = rc.encode_row_v2([(1, ft, "a" * 65535)])
    assert not rc.parse_row_v2(data).large
    assert rc.decode_row(data, {1: ft}) == {1: "a" * 65535}
    # one more byte switches to the large layout (encoder.go: len(r.data) > math.MaxUint16)
    assert rc.parse_row_v2(rc.encode_row_v2([(1, ft, "a" * 65536)])).large


def test_tidb_encode_large_small_reuse_bug() -> None:
    # TiDB rowcodec_test.go, TestEncodeLargeSmallReuseBug: id 300 with an empty string, then id 1 with 2
    large = rc.encode_row_v2([(300, FieldType(mt.TypeString), b"")])
    assert large == bytes([128, 1, 1, 0, 0, 0, 44, 1, 0, 0, 0, 0, 0, 0])  # row.go layout, 4-byte id and offset
    assert rc.decode_row(large, {300: FieldType(mt.TypeString)}) == {300: ""}
    small = rc.encode_row_v2([(1, LONGLONG, 2)])
    assert small == bytes([128, 0, 1, 0, 0, 0, 1, 1, 0, 2])
    assert rc.decode_row(small, {1: LONGLONG}) == {1: 2}


def test_tidb_nil_and_default_and_dropped_columns() -> None:
    # TiDB rowcodec_test.go, TestNilAndDefault: a schema column the row lacks is absent (the caller fills the
    # default); TestEncodeKindNullDatum: a NULL is present as NULL.
    data = rc.encode_row_v2([(1, LONGLONG, None), (2, LONGLONG, 2)])
    assert rc.decode_row(data, {1: LONGLONG, 2: LONGLONG, 3: ULONGLONG}) == {1: None, 2: 2}
    assert rc.decode_row(data, {2: LONGLONG}) == {2: 2}  # column 1 dropped
    assert rc.decode_row(data, {}) == {}


def test_tidb_old_row_codec() -> None:
    # TiDB rowcodec_test.go, TestOldRowCodec / TestCodecUtil: EncodeOldRow(MakeDatums(1, 2, 3, nil), ids 1..4).
    cols: list[tuple[int, FieldType, Any]] = [(1, LONGLONG, 1), (2, LONGLONG, 2), (3, LONGLONG, 3), (4, NULLTYPE, None)]
    old = rc.encode_row_datum(cols)
    # codec.go EncodeValue: varintFlag (8) and zig-zag varints for ids and values, NilFlag (0) for nil.
    assert old == bytes([8, 2, 8, 2, 8, 4, 8, 4, 8, 6, 8, 6, 8, 8, 0])
    assert old[0] != rc.CODEC_VER  # IsNewFormat is false
    assert rc.decode_row(old, schema_of(cols)) == {1: 1, 2: 2, 3: 3, 4: None}
    assert rc.decode_row(rc.encode_row_v2(cols), schema_of(cols)) == {1: 1, 2: 2, 3: 3, 4: None}
    # tablecodec.EncodeOldRow of no columns is NilFlag alone; DecodeRowWithMap reads it as an empty row
    assert rc.encode_row_datum([]) == b"\x00"
    assert rc.decode_row(b"\x00", {1: LONGLONG}) == {}
    assert rc.decode_row(b"", {1: LONGLONG}) == {}


def test_datum_row_other_flags() -> None:
    """Datum flags the datum encoder never writes but TiDB's DecodeOne reads (codec.go): comparable int, uint,
    memcomparable bytes, duration."""
    def comparable_int(v: int) -> bytes:  # codec.EncodeInt: big-endian with the sign bit flipped
        return struct.pack(">Q", (v & ((1 << 64) - 1)) ^ (1 << 63))

    data = (
        bytes([rc.INT_FLAG]) + comparable_int(7) + bytes([rc.INT_FLAG]) + comparable_int(-5)
        + bytes([rc.UINT_FLAG, 0, 0, 0, 0, 0, 0, 0, 8]) + bytes([rc.BYTES_FLAG, 104, 105, 0, 0, 0, 0, 0, 0, 249])
        + bytes([rc.VARINT_FLAG, 18]) + bytes([rc.DURATION_FLAG]) + comparable_int(1500)
    )
    schema = {7: LONGLONG, 8: TEXT, 9: DURATION}
    assert rc.decode_row(data, schema) == {7: -5, 8: "hi", 9: dt.timedelta(microseconds=1)}


# --- DECIMAL: mydecimal.go and mydecimal_test.go ------------------------------------------------------------------


def test_mydecimal_tobin_doc_example() -> None:
    # TiDB pkg/types/mydecimal.go, the ToBin doc comment: 1234567890.1234 as DECIMAL(14,4)
    assert rc.decimal_to_bin(Decimal("1234567890.1234"), 14, 4) == (bytes.fromhex("810DFB38D204D2"), None)
    assert rc.decimal_to_bin(Decimal("-1234567890.1234"), 14, 4) == (bytes.fromhex("7EF204C72DFB2D"), None)
    assert rc.decimal_from_bin(bytes.fromhex("7EF204C72DFB2D"), 14, 4) == Decimal("-1234567890.1234")
    assert rc.decimal_bin_size(14, 4) == 7


# TiDB pkg/types/mydecimal_test.go, TestToBinFromBin: input, precision, frac, FromBin(ToBin) output, ToBin error
TO_BIN_FROM_BIN = [
    ("-10.55", 4, 2, "-10.55", None),
    ("0.0123456789012345678912345", 30, 25, "0.0123456789012345678912345", None),
    ("12345", 5, 0, "12345", None),
    ("12345", 10, 3, "12345.000", None),
    ("123.45", 10, 3, "123.450", None),
    ("-123.45", 20, 10, "-123.4500000000", None),
    (".00012345000098765", 15, 14, "0.00012345000098", "truncated"),
    (".00012345000098765", 22, 20, "0.00012345000098765000", None),
    (".12345000098765", 30, 20, "0.12345000098765000000", None),
    ("-.000000012345000098765", 30, 20, "-0.00000001234500009876", "truncated"),
    ("1234500009876.5", 30, 5, "1234500009876.50000", None),
    ("111111111.11", 10, 2, "11111111.11", "overflow"),
    ("000000000.01", 7, 3, "0.010", None),
    ("123.4", 10, 2, "123.40", None),
    ("1000", 3, 0, "0", "overflow"),
    ("0.1", 1, 1, "0.1", None),
    ("0.100", 1, 1, "0.1", "truncated"),
    ("0.1000", 1, 1, "0.1", "truncated"),
    ("0.10000", 1, 1, "0.1", "truncated"),
    ("0.100000", 1, 1, "0.1", "truncated"),
    ("0.1000000", 1, 1, "0.1", "truncated"),
    ("0.10", 1, 1, "0.1", "truncated"),
    ("0000000000000000000000000000000000000000000.000000000000123000000000000000", 15, 15, "0.000000000000123",
     "truncated"),
    ("00000000000000000000000000000.00000000000012300", 15, 15, "0.000000000000123", "truncated"),
    ("0000000000000000000000000000000000000000000.0000000000001234000000000000000", 16, 16, "0.0000000000001234",
     "truncated"),
    ("00000000000000000000000000000.000000000000123400", 16, 16, "0.0000000000001234", "truncated"),
    ("0.1", 2, 2, "0.10", None),
    ("0.10", 3, 3, "0.100", None),
    ("0.1", 3, 1, "0.1", None),
    ("0.0000000000001234", 32, 17, "0.00000000000012340", None),
    ("0.0000000000001234", 20, 20, "0.00000000000012340000", None),
]


@pytest.mark.parametrize(("value", "precision", "frac", "output", "loss"), TO_BIN_FROM_BIN)
def test_mydecimal_to_bin_from_bin(value: str, precision: int, frac: int, output: str, loss: str | None) -> None:
    data, got_loss = rc.decimal_to_bin(Decimal(value), precision, frac)
    assert got_loss == loss
    assert len(data) == rc.decimal_bin_size(precision, frac)
    assert format(rc.decimal_from_bin(data, precision, frac), "f") == output


@pytest.mark.parametrize(("precision", "frac"), [(82, 1), (-1, 1), (10, 31), (10, -1)])
def test_mydecimal_to_bin_bad_number(precision: int, frac: int) -> None:
    # TestToBinFromBin errTests: ErrBadNumber
    with pytest.raises(rc.RowCodecError):
        rc.decimal_to_bin(Decimal(1), precision, frac)


def test_encode_decimal_column_scale() -> None:
    ft = FieldType(mt.TypeNewDecimal, flen=5, decimal=1)
    assert rc.decode_row(rc.encode_row_v2([(1, ft, Decimal("12.30"))]), {1: ft}) == {1: Decimal("12.3")}
    for bad in (Decimal("0.15"), Decimal("12345"), Decimal("NaN")):
        with pytest.raises(rc.RowCodecError, match="column 1"):
            rc.encode_row_v2([(1, ft, bad)])


# --- packed time, float, JSON ---------------------------------------------------------------------------------------


def test_packed_time() -> None:
    # TiDB pkg/types/time.go ToPackedUint/FromPackedUint; the packed value is TestTypesNewRowCodec's
    assert rc.unpack_time(1840446893366133311) == (2011, 11, 10, 11, 11, 11, 999999)
    assert rc.pack_time(0, 0, 0) == 0
    zero = rc.encode_row_v2([(1, DATE, rc.ZERO_TIME), (2, DATETIME, rc.MySQLTime(2021, 2, 30, 1))])
    assert rc.decode_row(zero, {1: DATE, 2: DATETIME}) == {1: rc.ZERO_TIME, 2: rc.MySQLTime(2021, 2, 30, 1)}


def test_timestamp_aware_is_stored_in_utc() -> None:
    aware = dt.datetime(2024, 3, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=8)))
    data = rc.encode_row_v2([(1, TIMESTAMP, aware)])
    assert rc.decode_row(data, {1: TIMESTAMP}) == {1: dt.datetime(2024, 3, 1, 4, 0)}
    with pytest.raises(rc.RowCodecError, match="naive"):
        rc.encode_row_v2([(1, DATETIME, aware)])


@given(st.lists(st.floats(allow_nan=False), min_size=2, max_size=2))
def test_float_memcomparable_order(pair: list[float]) -> None:
    # codec.EncodeFloat: byte order is numeric order (and the bytes decode back)
    a, b = pair
    assert rc.decode_float(rc.encode_float(a)) == a
    if a < b:
        assert rc.encode_float(a) < rc.encode_float(b)


def test_json_literals_and_numbers() -> None:
    # json_binary.go appendBinaryJSON: literal byte, little-endian int64/uint64/float64, uvarint-length string;
    # in containers literals are inlined in the value entry
    assert rc.encode_json(None) == bytes([0x04, 0x00])
    assert rc.encode_json(True) == bytes([0x04, 0x01])
    assert rc.encode_json(42) == bytes([0x09]) + (42).to_bytes(8, "little")
    assert rc.encode_json(1 << 63) == bytes([0x0A]) + (1 << 63).to_bytes(8, "little")
    assert rc.encode_json("hi") == bytes([0x0C, 2]) + b"hi"
    assert rc.encode_json([False]) == bytes([0x03, 1, 0, 0, 0, 13, 0, 0, 0, 0x04, 0x02, 0, 0, 0])
    value = {"b": [1, "2", {"aa": "bb"}, 4.5, None], "a": True, "c": {}}
    assert rc.decode_json(rc.encode_json(value)) == value
    assert list(rc.decode_json(rc.encode_json(value))) == ["a", "b", "c"]  # keys sorted by bytes


# --- Hypothesis round trips --------------------------------------------------------------------------------------

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
UINT64 = st.integers(0, (1 << 64) - 1)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
ODD_DATES = st.builds(rc.MySQLTime, year=st.integers(0, 9999), month=st.just(0), day=st.integers(0, 31))


@st.composite
def decimal_columns(draw: st.DrawFn) -> tuple[FieldType, Decimal]:
    precision = draw(st.integers(1, 65))
    frac = draw(st.integers(0, min(precision, 30)))
    digits = draw(st.integers(-(10**precision) + 1, 10**precision - 1))
    value = Decimal(f"{digits}E-{frac}")
    if draw(st.booleans()):
        return FieldType(mt.TypeNewDecimal, flen=precision, decimal=frac), value
    return DECIMAL, value  # precision and frac taken from the value


TYPED_VALUES: list[st.SearchStrategy[tuple[FieldType, Any]]] = [
    st.tuples(st.just(FieldType(mt.TypeTiny)), st.integers(-128, 127)),
    st.tuples(st.just(FieldType(mt.TypeTiny, flag=mt.UnsignedFlag)), st.integers(0, 255)),
    st.tuples(st.just(SHORT), st.integers(-(1 << 15), (1 << 15) - 1)),
    st.tuples(st.just(FieldType(mt.TypeInt24)), st.integers(-(1 << 23), (1 << 23) - 1)),
    st.tuples(st.just(LONG), st.integers(-(1 << 31), (1 << 31) - 1)),
    st.tuples(st.just(LONGLONG), INT64),
    st.tuples(st.just(ULONGLONG), UINT64),
    st.tuples(st.just(FieldType(mt.TypeYear)), st.integers(1901, 2155)),
    st.tuples(st.just(FLOAT), st.floats(width=32, allow_nan=False)),
    st.tuples(st.just(DOUBLE), st.floats(allow_nan=False)),
    st.tuples(st.just(TEXT), st.text(max_size=20)),
    st.tuples(st.just(FieldType(mt.TypeString, collate="utf8mb4_general_ci")), st.text(max_size=5)),
    st.tuples(st.just(BLOB), st.binary(max_size=20)),
    st.tuples(st.just(FieldType(mt.TypeVarString, collate="binary")), st.binary(max_size=5)),
    decimal_columns(),
    st.tuples(st.just(DATE), st.dates() | ODD_DATES),
    st.tuples(st.just(DATETIME), st.datetimes() | ODD_DATES),
    st.tuples(st.just(TIMESTAMP), st.datetimes()),
    st.tuples(st.just(DURATION), st.timedeltas(-dt.timedelta(hours=838, minutes=59, seconds=59),
                                               dt.timedelta(hours=838, minutes=59, seconds=59))),
    st.tuples(st.just(FieldType(mt.TypeEnum, elems=("a", "b"))), st.integers(0, 65535)),
    st.tuples(st.just(FieldType(mt.TypeSet, elems=("a", "b"))), UINT64),
    st.tuples(st.just(FieldType(mt.TypeBit, flen=64)), UINT64),
    st.tuples(st.just(JSON), JSON_VALUES),
]


@st.composite
def rows(draw: st.DrawFn, max_id: int) -> list[tuple[int, FieldType, Any]]:
    ids = draw(st.lists(st.integers(1, max_id), unique=True, max_size=10))
    cols = []
    for cid in ids:
        ft, value = draw(st.one_of(TYPED_VALUES))
        cols.append((cid, ft, None if draw(st.integers(0, 4)) == 0 else value))
    return cols


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows(255))
def test_round_trip_small(cols: list[tuple[int, FieldType, Any]]) -> None:
    data = rc.encode_row_v2(cols)
    assert not rc.parse_row_v2(data).large
    assert rc.decode_row(data, schema_of(cols)) == values_of(cols)
    assert rc.decode_row(rc.encode_row_datum(cols), schema_of(cols)) == values_of(cols)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows(0xFFFFFFFF))
def test_round_trip_any_ids(cols: list[tuple[int, FieldType, Any]]) -> None:
    data = rc.encode_row_v2(cols)
    assert rc.parse_row_v2(data).large == any(cid > 255 for cid, _, _ in cols)
    assert rc.decode_row(data, schema_of(cols)) == values_of(cols)
    assert rc.decode_row(rc.encode_row_datum(cols), schema_of(cols)) == values_of(cols)


@settings(max_examples=20, deadline=None)
@given(rows(255))
def test_round_trip_large_data(cols: list[tuple[int, FieldType, Any]]) -> None:
    cols = [*cols, (0, BLOB, bytes(range(256)) * 257)]  # 65792 bytes of values: large layout, small ids
    data = rc.encode_row_v2(cols)
    assert rc.parse_row_v2(data).large
    assert rc.decode_row(data, schema_of(cols)) == values_of(cols)


@given(rows(300), st.data())
def test_schema_subset(cols: list[tuple[int, FieldType, Any]], data: st.DataObject) -> None:
    keep = data.draw(st.sets(st.sampled_from([cid for cid, _, _ in cols] or [1])))
    schema = {cid: ft for cid, ft, _ in cols if cid in keep} | {100_000: LONGLONG}  # plus a column added later
    expected = {cid: v for cid, v in values_of(cols).items() if cid in keep}
    assert rc.decode_row(rc.encode_row_v2(cols), schema) == expected
    assert rc.decode_row(rc.encode_row_datum(cols), schema) == expected


# --- corrupt input ----------------------------------------------------------------------------------------------


def _v2(*parts: int) -> bytes:
    return bytes(parts)


@pytest.mark.parametrize(
    ("data", "schema", "message"),
    [
        (_v2(128, 0, 1), {}, "header truncated"),
        (_v2(128, 0, 2, 0, 0, 0, 1), {}, "truncated"),
        (_v2(128, 1, 1, 0, 0, 0, 1, 0, 0), {}, "truncated"),
        (_v2(129, 0, 0, 0, 0, 0), {}, "unknown codec version 129 at byte 0"),
        (_v2(255), {}, "unknown codec version 255"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 3, 0, 7, 7), {1: LONGLONG}, "run past the end"),
        (_v2(128, 0, 2, 0, 0, 0, 1, 2, 2, 0, 1, 0, 7, 7), {}, "offset of column 2 at byte 10 is 1, before"),
        (_v2(128, 0, 2, 0, 0, 0, 2, 1, 1, 0, 2, 0, 7, 7), {}, "not ascending"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 1, 0, 7, 9), {}, "stray bytes"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 3, 0, 7, 7, 7), {1: LONGLONG}, "column 1 .*3-byte value at byte 9"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 3, 0, 0, 0, 0x80), {1: DECIMAL}, "bad header: precision 0"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 3, 0, 1, 2, 0x80), {1: DECIMAL}, "bad header: precision 1, frac 2"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 2, 0, 6, 4), {1: DECIMAL}, "at least 3 bytes"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 3, 0, 9, 0, 0x80), {1: DECIMAL}, "DECIMAL\\(9,0\\) at byte 11 needs 4 bytes"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 3, 0, 1, 0, 0x8A), {1: DECIMAL}, "holds 10, more than 1 digits"),
        (_v2(128, 2, 0, 0, 0, 0), {}, "checksum header missing at byte 6"),
        (_v2(128, 2, 0, 0, 0, 0, 3, 0, 0, 0, 0), {}, "checksum version 3"),
        (_v2(128, 2, 0, 0, 0, 0, 0x0A, 0, 0, 0, 0), {}, "needs 9 bytes"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 1, 0, 7), {1: NULLTYPE}, "TypeNull"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 1, 0, 0xFF), {1: TEXT}, "not valid UTF-8"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 2, 0, 0x0C, 5), {1: JSON}, "JSON string of 5 bytes"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 2, 0, 0x05, 0), {1: JSON}, "unknown JSON type code 0x05"),
        (_v2(128, 0, 1, 0, 0, 0, 1, 9, 0, 0x01, 1, 0, 0, 0, 99, 0, 0, 0), {1: JSON}, "claims 99 bytes"),
        (_v2(8, 2, 0x63), {1: LONGLONG}, "unknown datum flag 99 at byte 2"),
        (_v2(8, 2, 250), {1: LONGLONG}, "unknown datum flag 250"),
        (_v2(8, 2), {1: LONGLONG}, "without its value"),
        (_v2(2, 2, 65, 8, 2), {}, "column id datum at byte 0 is bytes, not an integer"),
        (_v2(8, 2, 2, 10, 65), {1: TEXT}, "5 bytes of data, 1 left"),
        (_v2(8, 2, 3, 1, 2), {1: LONGLONG}, "needs 8 bytes"),
        (_v2(8, 2, 6, 0, 0, 0x80), {1: DECIMAL}, "bad header"),
        (_v2(8, 2, 9, 0xFF), {1: LONGLONG}, "truncated at byte 4"),
        (_v2(8, 2, 9, *([0xFF] * 10), 1), {1: LONGLONG}, "overflows 64 bits"),
        (_v2(8, 2, 8, 4), {1: TEXT}, "column 1 \\(TypeVarchar\\): int datum at byte 2 does not fit"),
        (_v2(8, 2, 10, 0x0C, 9, 65), {1: JSON}, "needs 11 bytes"),
        (_v2(8, 2, 1, 65, 0, 0, 0, 0, 0, 0, 7, 250), {1: TEXT}, "non-zero padding"),
    ],
)
def test_corrupt_input(data: bytes, schema: dict[int, FieldType], message: str) -> None:
    with pytest.raises(rc.RowCodecError, match=message):
        rc.decode_row(data, schema)


def test_unsupported_values() -> None:
    opaque = bytes([0x0D, 0xFC, 3]) + b"abc"  # JSON opaque: MySQL type byte, uvarint length, data
    row = bytes([128, 0, 1, 0, 0, 0, 1, len(opaque), 0]) + opaque
    with pytest.raises(rc.UnsupportedValueError, match="opaque value \\(type code 0x0d\\)"):
        rc.decode_row(row, {1: JSON})
    assert isinstance(rc.UnsupportedValueError("x"), NotImplementedError)
    assert rc.decode_row(row, {}) == {}  # a dropped JSON column is never decoded
    old = bytes([8, 2, 10]) + opaque
    assert rc.decode_row(old, {}) == {}  # json_size still finds its end
    with pytest.raises(rc.UnsupportedValueError):
        rc.decode_row(old, {1: JSON})


VECTOR3 = FieldType(mt.TypeTiDBVectorFloat32, flag=mt.BinaryFlag, flen=3, decimal=0, charset="binary",
                   collate="binary")


def test_vector_values_both_formats() -> None:
    # rowcodec encoder.go encodeValueDatum: a v2 value is VectorFloat32.SerializeTo (TestVectorEndianess's bytes for
    # [1.1, 2.2]); codec.go encode: the datum format puts vectorFloat32Flag (20) before them.
    serialized = bytes([0x02, 0x00, 0x00, 0x00, 0xCD, 0xCC, 0x8C, 0x3F, 0xCD, 0xCC, 0x0C, 0x40])
    v = VectorFloat32.of([1.1, 2.2])
    v2 = rc.encode_row_v2([(1, VECTOR3, v), (2, VECTOR3, VectorFloat32.of([])), (3, VECTOR3, None)])
    assert v2 == bytes([128, 0, 2, 0, 1, 0, 1, 2, 3, 12, 0, 16, 0]) + serialized + bytes(4)
    assert rc.decode_row(v2, {1: VECTOR3, 2: VECTOR3, 3: VECTOR3}) == {1: v, 2: VectorFloat32(()), 3: None}
    datum = rc.encode_row_datum([(1, VECTOR3, v)])
    assert datum == bytes([rc.VARINT_FLAG, 2, rc.VECTOR_FLOAT32_FLAG]) + serialized
    assert rc.decode_row(datum, {1: VECTOR3}) == {1: v}
    assert rc.decode_row(datum + bytes([rc.VARINT_FLAG, 4, rc.NIL_FLAG]), {}) == {}  # its end found, not decoded


@pytest.mark.parametrize(("data", "message"), [
    (bytes([128, 0, 1, 0, 0, 0, 1, 3, 0, 1, 0, 0]),
     "column 1 \\(VECTOR\\) value at byte 9: bad VectorFloat32 value header"),
    (bytes([128, 0, 1, 0, 0, 0, 1, 6, 0, 1, 0, 0, 0, 0, 0]), "expected=8"),
    (bytes([8, 2, 20, 1, 0]), "bad VectorFloat32 value header \\(len=2\\)"),
    (bytes([8, 2, 20, 2, 0, 0, 0, 0, 0, 0, 0]), "bad VectorFloat32 value \\(len=8, expected=12\\)"),
    (bytes([8, 2, 20, 0, 0, 0, 0]), "vector datum at byte 2 does not fit"),
])
def test_bad_vector_values_are_row_errors(data: bytes, message: str) -> None:
    schema = {1: VECTOR3} if "does not fit" not in message else {1: LONGLONG}
    with pytest.raises(rc.RowCodecError, match=message):
        rc.decode_row(data, schema)


def test_decimal_65_30_both_ways_every_digit() -> None:
    # DECIMAL(65,30): 35 integer digits in 4 + 3 x 4 bytes, 30 fraction digits in 3 x 4 + 2 (DecimalBinSize 30).
    ft = FieldType(mt.TypeNewDecimal, flen=65, decimal=30)
    assert rc.decimal_bin_size(65, 30) == 30
    for text in ("99999999999999999999999999999999999.999999999999999999999999999999",
                 "-12345678901234567890123456789012345.123456789012345678901234567891",
                 "0.000000000000000000000000000001", "-0.100000000000000000000000000000"):
        value = Decimal(text)
        for data in (rc.encode_row_v2([(1, ft, value)]), rc.encode_row_datum([(1, ft, value)])):
            got = rc.decode_row(data, {1: ft})[1]
            assert got == value and format(got, "f") == text


@pytest.mark.parametrize(
    ("cols", "message"),
    [
        ([(1, LONGLONG, 1), (1, LONGLONG, 2)], "appears twice"),
        ([(1 << 32, LONGLONG, 1)], "does not fit"),
        ([(1, FieldType(mt.TypeTiny), 1 << 63)], "outside"),
        ([(1, ULONGLONG, -1)], "outside"),
        ([(1, LONGLONG, "1")], "wants an int"),
        ([(1, FLOAT, 1e39)], "outside float32"),
        ([(1, TEXT, 1)], "wants str or bytes"),
        ([(1, DATE, dt.datetime(2020, 1, 1))], "wants a datetime.date"),
        ([(1, DATETIME, dt.date(2020, 1, 1))], "wants a datetime.datetime"),
        ([(1, DATE, rc.MySQLTime(2020, 13, 1))], "out of range"),
        ([(1, DURATION, 5)], "wants a datetime.timedelta"),
        ([(1, JSON, {"a": float("nan")})], "cannot hold the float"),
        ([(1, JSON, {1: 2})], "keys must be str"),
        ([(1, JSON, 1 << 64)], "does not fit int64 or uint64"),
        ([(1, FieldType(mt.TypeGeometry), b"x")], "no row value encoding"),
        ([(1, VECTOR3, [1.0, 2.0, 3.0])], "wants a VectorFloat32"),
    ],
)
def test_encode_rejects(cols: list[tuple[int, FieldType, Any]], message: str) -> None:
    with pytest.raises(rc.RowCodecError, match=message):
        rc.encode_row_v2(cols)


def test_json_overlapping_entries_are_bounded() -> None:
    # 60 nested arrays, each with two entries pointing at the same next array: following offsets blindly visits
    # 2**60 elements; the element budget (fewer elements than bytes) stops it.
    doc = struct.pack("<II", 0, 8)
    for _ in range(60):
        doc = struct.pack("<II", 2, 18 + len(doc)) + (bytes([0x03]) + struct.pack("<I", 18)) * 2 + doc
    with pytest.raises(rc.RowCodecError, match="overlapping"):
        rc.decode_json(bytes([0x03]) + doc)


SAMPLE_COLS: list[tuple[FieldType, Any]] = [
    (LONGLONG, -7), (ULONGLONG, 1 << 40), (DOUBLE, 2.5), (TEXT, "héllo"), (BLOB, b"\x00\xff"),
    (FieldType(mt.TypeNewDecimal, flen=20, decimal=6), Decimal("-1234.5678")), (DATE, dt.date(2020, 2, 29)),
    (TIMESTAMP, dt.datetime(2020, 1, 1, 1, 2, 3, 4)), (DURATION, dt.timedelta(hours=-3)),
    (JSON, {"k": [1, None, "x", {"n": 1.5}]}),
]
SAMPLE_SCHEMA = {cid: ft for cid, (ft, _) in enumerate(SAMPLE_COLS, start=1)}
SAMPLE_ROW = rc.encode_row_v2([(cid, ft, v) for cid, (ft, v) in enumerate(SAMPLE_COLS, start=1)])
SAMPLE_DATUM_ROW = rc.encode_row_datum([(cid, ft, v) for cid, (ft, v) in enumerate(SAMPLE_COLS, start=1)])


def _decodes_or_row_error(data: bytes) -> None:
    try:
        rc.decode_row(data, SAMPLE_SCHEMA)
    except rc.RowCodecError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_fuzz_random_bytes(data: bytes) -> None:
    _decodes_or_row_error(data)
    _decodes_or_row_error(bytes([128]) + data)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([SAMPLE_ROW, SAMPLE_DATUM_ROW]), st.integers(0, 10_000), st.integers(0, 255),
       st.integers(0, 10_000))
def test_fuzz_mutated_rows(base: bytes, where: int, byte: int, cut: int) -> None:
    mutated = bytearray(base)
    mutated[where % len(mutated)] = byte
    _decodes_or_row_error(bytes(mutated))
    _decodes_or_row_error(base[:cut % len(base)])


def test_every_v2_truncation_is_a_row_error() -> None:
    # (a datum row cut between two columns is a valid shorter row, so only v2 is checked byte by byte)
    assert rc.decode_row(SAMPLE_ROW, SAMPLE_SCHEMA) == rc.decode_row(SAMPLE_DATUM_ROW, SAMPLE_SCHEMA)
    for cut in range(1, len(SAMPLE_ROW)):
        with pytest.raises(rc.RowCodecError):
            rc.decode_row(SAMPLE_ROW[:cut], SAMPLE_SCHEMA)
