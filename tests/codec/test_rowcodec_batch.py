"""Batch decoding (numpy over an Arrow batch) against the scalar row codec, value by value."""

from __future__ import annotations

import datetime as dt
from decimal import Context, Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_core.codec import mysql_type as mt
from cdc_core.codec import rowcodec
from cdc_core.codec.rowcodec_batch import (
    VECTOR_TYPE,
    ArrowColumn,
    RowDecodeError,
    arrow_type,
    decode_batch,
    decode_rows,
    json_text,
)
from cdc_core.codec.vector import VectorFloat32

RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60)

FT = mt.FieldType
TYPES: dict[str, tuple[mt.FieldType, st.SearchStrategy[Any]]] = {
    "tinyint": (FT(mt.TypeTiny), st.integers(-128, 127)),
    "tinyint unsigned": (FT(mt.TypeTiny, mt.UnsignedFlag), st.integers(0, 255)),
    "smallint": (FT(mt.TypeShort), st.integers(-(1 << 15), (1 << 15) - 1)),
    "mediumint": (FT(mt.TypeInt24), st.integers(-(1 << 23), (1 << 23) - 1)),
    "int": (FT(mt.TypeLong), st.integers(-(1 << 31), (1 << 31) - 1)),
    "int unsigned": (FT(mt.TypeLong, mt.UnsignedFlag), st.integers(0, (1 << 32) - 1)),
    "bigint": (FT(mt.TypeLonglong), st.integers(-(1 << 63), (1 << 63) - 1)),
    "bigint unsigned": (FT(mt.TypeLonglong, mt.UnsignedFlag), st.integers(0, (1 << 64) - 1)),
    "float": (FT(mt.TypeFloat), st.floats(width=32, allow_nan=False, allow_infinity=False)),
    "double": (FT(mt.TypeDouble), st.floats(allow_nan=False, allow_infinity=False)),
    "decimal(12,2)": (FT(mt.TypeNewDecimal, flen=12, decimal=2),
                      st.decimals(places=2, min_value=-(10**10) + 1, max_value=10**10 - 1)),
    "decimal(38,10)": (FT(mt.TypeNewDecimal, flen=38, decimal=10),
                       st.decimals(places=10, min_value=-(10**28) + 1, max_value=10**28 - 1)),
    "decimal(5,0)": (FT(mt.TypeNewDecimal, flen=5, decimal=0),
                     st.decimals(places=0, min_value=-99999, max_value=99999)),
    "decimal(65,30)": (FT(mt.TypeNewDecimal, flen=65, decimal=30),  # wider than Arrow's: its text
                       st.decimals(places=30, min_value=-(10**35) + 1, max_value=10**35 - 1)),
    "date": (FT(mt.TypeDate), st.dates()),
    "datetime": (FT(mt.TypeDatetime, decimal=6), st.datetimes()),
    # Dates TiDB stores under a permissive sql_mode that Delta cannot hold: NULL, and marked as mapped.
    "date (any TiDB stores)": (FT(mt.TypeDate), st.dates() | st.sampled_from(
        [rowcodec.ZERO_TIME, rowcodec.MySQLTime(2021, 0, 5), rowcodec.MySQLTime(2021, 6, 0),
         rowcodec.MySQLTime(0, 1, 1), rowcodec.MySQLTime(2021, 2, 30)])),
    "timestamp (any TiDB stores)": (FT(mt.TypeTimestamp, decimal=6), st.datetimes(
        min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(2038, 1, 1)) | st.just(rowcodec.ZERO_TIME)),
    "vector": (FT(mt.TypeTiDBVectorFloat32, flag=mt.BinaryFlag, collate="binary"),
               st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=5).map(
                   VectorFloat32.of)),
    "timestamp": (FT(mt.TypeTimestamp, decimal=6), st.datetimes(min_value=dt.datetime(1970, 1, 2),
                                                                max_value=dt.datetime(2038, 1, 1))),
    "time": (FT(mt.TypeDuration, decimal=6), st.timedeltas(min_value=-dt.timedelta(hours=838),
                                                           max_value=dt.timedelta(hours=838))),
    "year": (FT(mt.TypeYear), st.integers(1901, 2155)),
    "varchar": (FT(mt.TypeVarchar, charset="utf8mb4", collate="utf8mb4_bin"), st.text(max_size=30)),
    "blob": (FT(mt.TypeBlob, collate="binary"), st.binary(max_size=30)),
    "enum": (FT(mt.TypeEnum, elems=("a", "b", "c")), st.integers(0, 3)),
    "set": (FT(mt.TypeSet, elems=("x", "y", "z")), st.integers(0, 7)),
    "bit(12)": (FT(mt.TypeBit, flen=12), st.integers(0, (1 << 12) - 1)),
    "json": (FT(mt.TypeJSON), st.recursive(st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1)
                                           | st.text(max_size=5),
                                           lambda inner: st.lists(inner, max_size=3)
                                           | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                                           max_leaves=6)),
}
NAMES = sorted(TYPES)


def expected(ft: mt.FieldType, value: Any) -> Any:
    """What the batch decoder's Arrow value is for the scalar decoder's ``value`` (``as_py`` form)."""
    if value is None or isinstance(value, rowcodec.MySQLTime):  # a date Delta cannot hold: NULL
        return None
    tp = ft.tp
    if tp == mt.TypeTimestamp:
        return value.replace(tzinfo=dt.UTC)
    if tp == mt.TypeDuration:
        return value // dt.timedelta(microseconds=1) * 1000
    if tp == mt.TypeEnum:
        return ft.elems[value - 1] if value else ""
    if tp == mt.TypeSet:
        return ",".join(e for i, e in enumerate(ft.elems) if value >> i & 1)
    if tp == mt.TypeBit:
        return value.to_bytes((ft.flen + 7) // 8, "big")
    if tp == mt.TypeJSON:
        return json_text(value)
    if tp == mt.TypeNewDecimal:
        q = value.quantize(Decimal(1).scaleb(-ft.decimal), context=Context(prec=80))
        return format(q.copy_abs() if q.is_zero() else q, "f") if ft.flen > 38 else q
    if tp == mt.TypeTiDBVectorFloat32:
        return list(value.elements)
    return value


@st.composite
def batches(draw: Any) -> tuple[list[tuple[int, str]], list[bytes | None], list[dict[int, Any]]]:
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6))
    big = draw(st.booleans())  # ids past 255: the large layout
    cols = [(i * (300 if big else 1) + 1, n) for i, n in enumerate(names)]
    rows: list[bytes | None] = []
    scalars: list[dict[int, Any]] = []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 9)) == 0:
            rows.append(None)
            scalars.append({})
            continue
        present = [(cid, n) for cid, n in cols if draw(st.booleans()) or draw(st.booleans())]
        items = [(cid, TYPES[n][0], draw(st.none() | TYPES[n][1])) for cid, n in present]
        items.append((10_000, FT(mt.TypeLong), 1))  # a dropped column: never asked for
        encoded = (rowcodec.encode_row_datum(items) if draw(st.integers(0, 5)) == 0
                   else rowcodec.encode_row_v2(items))
        rows.append(encoded)
        scalars.append(rowcodec.decode_row(encoded, {cid: TYPES[n][0] for cid, n in cols}))
    return cols, rows, scalars


@RELAXED
@given(batches(), st.booleans())
def test_batch_decoding_matches_the_scalar_codec(batch: Any, large_offsets: bool) -> None:
    cols, rows, scalars = batch
    defaults = {cid: (7 if TYPES[n][0].tp == mt.TypeLong else None) for cid, n in cols}
    arr = pa.array(rows, pa.large_binary() if large_offsets else pa.binary())
    decoded = decode_batch(arr, [ArrowColumn(cid, TYPES[n][0], defaults[cid]) for cid, n in cols])
    for (cid, name), column, mapped in zip(cols, decoded.arrays, decoded.mapped, strict=True):
        ft = TYPES[name][0]
        assert column.type == arrow_type(ft)
        for i, (raw, scalar) in enumerate(zip(rows, scalars, strict=True)):
            want = None if raw is None else expected(ft, scalar[cid]) if cid in scalar else defaults[cid]
            assert column[i].as_py() == want, (name, i)
            maps = raw is not None and isinstance(scalar.get(cid), rowcodec.MySQLTime)
            assert (mapped is not None and bool(mapped[i])) == maps, (name, i)


def test_golden_v2_row_from_tikv() -> None:
    # TiKV components/tidb_query_datatype/src/codec/row/v2/encoder_for_test.rs test_encode: ids 1 (int 1000),
    # 12 (int 2), 33 (NULL), 335 (varchar "abc"): past 255, so the large layout.
    golden = bytes([128, 1, 3, 0, 1, 0, 1, 0, 0, 0, 12, 0, 0, 0, 79, 1, 0, 0, 33, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0,
                    6, 0, 0, 0, 232, 3, 2, 97, 98, 99])
    cols = [ArrowColumn(1, FT(mt.TypeLonglong)), ArrowColumn(12, FT(mt.TypeLonglong)),
            ArrowColumn(33, FT(mt.TypeLonglong)), ArrowColumn(335, FT(mt.TypeVarchar)),
            ArrowColumn(2, FT(mt.TypeLong), default=5)]
    got = [c.to_pylist() for c in decode_rows(pa.array([golden, None]), cols)]
    assert got == [[1000, None], [2, None], [None, None], ["abc", None], [5, None]]


def _v2(items: list[tuple[int, mt.FieldType, Any]]) -> bytes:
    return rowcodec.encode_row_v2(items)


@pytest.mark.parametrize("value, cols, message", [
    (bytes([128, 0, 5, 0, 0, 0, 1]), [ArrowColumn(1, FT(mt.TypeLong))], "run past its end"),
    (bytes([128, 0, 1]), [ArrowColumn(1, FT(mt.TypeLong))], "shorter than a v2 header"),
    (bytes([128, 0, 1, 0, 0, 0, 1, 9, 0, 5]), [ArrowColumn(1, FT(mt.TypeLong))], "past its end"),
    (bytes([128, 0, 2, 0, 0, 0, 2, 1, 1, 0, 2, 0, 5, 6]), [ArrowColumn(1, FT(mt.TypeLong))], "not strictly ascending"),
    (bytes([128, 0, 1, 0, 0, 0, 1, 3, 0, 1, 2, 3]), [ArrowColumn(1, FT(mt.TypeLong))], "3-byte integer"),
    (bytes([128, 0, 1, 0, 0, 0, 1, 2, 0, 1, 2]), [ArrowColumn(1, FT(mt.TypeDouble))], "2-byte float"),
    (_v2([(1, FT(mt.TypeVarchar), b"\xff\xfe")]), [ArrowColumn(1, FT(mt.TypeVarchar))], "not UTF-8"),
    (_v2([(1, FT(mt.TypeLonglong), 1 << 40)]), [ArrowColumn(1, FT(mt.TypeLong))], "does not fit int32"),
    (_v2([(1, FT(mt.TypeLonglong), rowcodec.pack_time(2021, 1, 1, 25))]), [ArrowColumn(1, FT(mt.TypeDatetime))],
     "2021-01-01 25:00:00.000000 is no date TiDB stores"),
    (_v2([(1, FT(mt.TypeNewDecimal, flen=12, decimal=4), Decimal("12345.6789"))]),
     [ArrowColumn(1, FT(mt.TypeNewDecimal, flen=6, decimal=2))], "does not fit DECIMAL\\(6,2\\)"),
    (bytes([128, 0, 1, 0, 0, 0, 1, 2, 0, 99, 0]), [ArrowColumn(1, FT(mt.TypeNewDecimal, flen=10, decimal=0))],
     "takes|bad header|DECIMAL"),
    (_v2([(1, FT(mt.TypeEnum), 5)]), [ArrowColumn(1, FT(mt.TypeEnum, elems=("a",)))], "ENUM index 5"),
])
def test_bad_values_name_row_and_column(value: bytes, cols: list[ArrowColumn], message: str) -> None:
    good = _v2([(2, FT(mt.TypeLong), 1)])  # column 1 absent: its default
    with pytest.raises(RowDecodeError, match=message) as info:
        decode_rows(pa.array([good, value]), cols)
    assert info.value.row == 1
    assert info.value.col_id in (1, None)


def test_decimal_stored_under_another_scale_is_rescaled() -> None:
    # Rows written as DECIMAL(6,2) read after a MODIFY to DECIMAL(8,3) (fits: vectorized) and to DECIMAL(12,5).
    old = FT(mt.TypeNewDecimal, flen=6, decimal=2)
    rows = [_v2([(1, old, Decimal(v))]) for v in ("1234.56", "-0.05", "0")]
    for p, s in ((8, 3), (12, 5), (6, 2)):
        [col] = decode_rows(pa.array(rows), [ArrowColumn(1, FT(mt.TypeNewDecimal, flen=p, decimal=s))])
        assert col.type == pa.decimal128(p, s)
        assert col.to_pylist() == [Decimal("1234.56"), Decimal("-0.05"), Decimal(0)]


def test_empty_batch_and_empty_value() -> None:
    cols = [ArrowColumn(1, FT(mt.TypeLong), default=3), ArrowColumn(2, FT(mt.TypeVarchar))]
    assert [len(c) for c in decode_rows(pa.array([], pa.binary()), cols)] == [0, 0]
    assert [c.to_pylist() for c in decode_rows(pa.array([b""]), cols)] == [[3], [None]]


def test_vectors_are_float32_lists_from_every_row_format() -> None:
    # TiDB's TestVectorEndianess bytes of [1.1, 2.2] as a v2 value; a datum row (flag 20); a row without the id (its
    # default); NULL; a delete (no row).
    ft = FT(mt.TypeTiDBVectorFloat32, flag=mt.BinaryFlag, flen=2, decimal=0, collate="binary")
    golden = bytes([128, 0, 1, 0, 0, 0, 1, 12, 0, 0x02, 0, 0, 0, 0xCD, 0xCC, 0x8C, 0x3F, 0xCD, 0xCC, 0x0C, 0x40])
    datum = rowcodec.encode_row_datum([(1, ft, VectorFloat32.of([-0.0, 3.0]))])
    rows = [golden, datum, _v2([(2, FT(mt.TypeLong), 1)]), _v2([(1, ft, None)]), None]
    [col] = decode_rows(pa.array(rows), [ArrowColumn(1, ft, default=VectorFloat32.of([0.5, 0.25]))])
    assert col.type == VECTOR_TYPE == arrow_type(ft)
    f32 = VectorFloat32.of([1.1, 2.2]).elements
    assert col.to_pylist() == [list(f32), [-0.0, 3.0], [0.5, 0.25], None, None]
    short = bytes([128, 0, 1, 0, 0, 0, 1, 8, 0, 2, 0, 0, 0, 0, 0, 0x80, 0x3F])  # two elements said, one there
    with pytest.raises(RowDecodeError, match=r"column 1 \(TypeTiDBVectorFloat32\) of row value 1: bad VectorFloat32 "
                                             r"value \(len=8, expected=12\)") as info:
        decode_rows(pa.array([golden, short]), [ArrowColumn(1, ft)])
    assert (info.value.row, info.value.col_id) == (1, 1)


def test_a_decimal_wider_than_38_digits_keeps_every_digit_as_its_text() -> None:
    wide = FT(mt.TypeNewDecimal, flen=65, decimal=30)
    texts = ["12345678901234567890123456789012345.123456789012345678901234567891", "-0.000000000000000000000000000001",
             "0.000000000000000000000000000000"]
    rows = [_v2([(1, wide, Decimal(t))]) for t in texts]
    rows.append(_v2([(1, FT(mt.TypeNewDecimal, flen=40, decimal=2), Decimal("-7.5"))]))  # before a MODIFY COLUMN
    rows.append(rowcodec.encode_row_datum([(1, wide, Decimal("1"))]))
    [col] = decode_rows(pa.array(rows), [ArrowColumn(1, wide)])
    assert col.type == pa.string()
    assert col.to_pylist() == [*texts, "-7.5" + "0" * 29, "1." + "0" * 30]
    [narrow] = decode_rows(pa.array([_v2([(1, FT(mt.TypeNewDecimal, flen=38, decimal=0), Decimal(10**37))])]),
                           [ArrowColumn(1, FT(mt.TypeNewDecimal, flen=38, decimal=0))])
    assert narrow.type == pa.decimal128(38, 0)  # 38 digits still fit Arrow's decimal


def test_dates_delta_cannot_hold_are_null_and_say_so() -> None:
    # What TiDB stores under sql_mode '' or ALLOW_INVALID_DATES: the zero date, a zero month or day, year 0, Feb 30.
    date, dtm, ts = FT(mt.TypeDate), FT(mt.TypeDatetime, decimal=0), FT(mt.TypeTimestamp, decimal=0)
    mt_ = rowcodec.MySQLTime
    rows = [
        _v2([(1, date, rowcodec.ZERO_TIME), (2, dtm, mt_(2021, 0, 5, 10)), (3, ts, rowcodec.ZERO_TIME)]),
        _v2([(1, date, dt.date(2024, 2, 29)), (2, dtm, mt_(2021, 2, 30, 1, 2, 3)), (3, ts, dt.datetime(2024, 1, 1))]),
        rowcodec.encode_row_datum([(1, date, mt_(0, 1, 1)), (2, dtm, dt.datetime(2000, 1, 1, 5))]),
        _v2([(4, FT(mt.TypeLong), 1)]),  # no values: the defaults
        None,
    ]
    cols = [ArrowColumn(1, date, default=rowcodec.ZERO_TIME), ArrowColumn(2, dtm), ArrowColumn(3, ts)]
    out = decode_batch(pa.array(rows), cols)
    assert [c.to_pylist() for c in out.arrays] == [
        [None, dt.date(2024, 2, 29), None, None, None],
        [None, None, dt.datetime(2000, 1, 1, 5), None, None],
        [None, dt.datetime(2024, 1, 1, tzinfo=dt.UTC), None, None, None]]
    assert [m.tolist() if m is not None else None for m in out.mapped] == [
        [True, False, True, True, False], [True, True, False, False, False], [True, False, False, False, False]]
    assert decode_batch(pa.array([rows[1]]), cols[:1]).mapped == [None]  # nothing mapped: no mask
