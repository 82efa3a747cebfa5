"""Every MySQL type TiDB supports: definitions, FieldTypes, conversions, the row codec's values, and how the
silver table follows a type change."""

from __future__ import annotations

import datetime as dt
import re
import struct
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_core.codec import mysql_type as mt
from cdc_core.codec.row import decode_row, encode_row
from cdc_core.codec.value_text import json_value
from cdc_core.schema import column_type as ct
from cdc_core.schema.model import Column, SchemaError, TableInfo

# One column of every type, as the all-types tests define them.
ALL = (
    Column(1, "ti", "tinyint"), Column(2, "tiu", "tinyint", unsigned=True), Column(3, "si", "smallint"),
    Column(4, "mi", "mediumint", unsigned=True), Column(5, "i", "int"), Column(6, "iu", "int", unsigned=True),
    Column(7, "bi", "bigint"), Column(8, "biu", "bigint", unsigned=True), Column(9, "f", "float"),
    Column(10, "d", "double"), Column(11, "dec", "decimal", precision=30, scale=10),
    Column(12, "dt", "date"), Column(13, "dtm", "datetime", fsp=6), Column(14, "ts", "timestamp", fsp=3),
    Column(15, "tm", "time", fsp=2), Column(16, "y", "year"), Column(17, "c", "char", length=4),
    Column(18, "vc", "varchar", length=16), Column(19, "b", "binary", length=4),
    Column(20, "vb", "varbinary", length=8), Column(21, "tt", "tinytext"), Column(22, "t", "text"),
    Column(23, "mt", "mediumtext"), Column(24, "lt", "longtext"), Column(25, "tb", "tinyblob"),
    Column(26, "bl", "blob"), Column(27, "mb", "mediumblob"), Column(28, "lb", "longblob"),
    Column(29, "e", "enum", elems=("small", "Medium", "large")), Column(30, "s", "set", elems=("a", "b", "c")),
    Column(31, "bt", "bit", length=12), Column(32, "j", "json"), Column(33, "v", "vector", length=3),
    Column(34, "w", "vector"), Column(35, "dw", "decimal", precision=65, scale=30),
)
SAMPLE: dict[str, Any] = {
    "ti": -128, "tiu": 255, "si": -32768, "mi": 16777215, "i": -2147483648, "iu": 4294967295,
    "bi": -(1 << 63), "biu": (1 << 64) - 1, "f": 1.5, "d": -2.25e-300, "dec": "-12345678901234567890.0123456789",
    "dt": "2024-02-29", "dtm": "9999-12-31 23:59:59.999999", "ts": "2038-01-19 03:14:07.999",
    "tm": "-838:59:59", "y": 2155, "c": "ab", "vc": "héllo wörld", "b": b"\x00\x01", "vb": b"\xff" * 8,
    "tt": "t" * 255, "t": "text", "mt": "m", "lt": "l", "tb": b"\x00", "bl": b"blob", "mb": b"", "lb": b"\x01",
    "e": "medium", "s": "c,a", "bt": 0xABC, "j": '{"b": [1, 2.5, null, true], "a": {"z": "ü"}}',
    "v": "[1.5, -2, 0.1]", "w": "[]", "dw": "-12345678901234567890123456789012345.000000000000000000000000000001",
}


def table() -> TableInfo:
    return TableInfo(id=77, db_name="d", name="all", columns=ALL, max_column_id=len(ALL))


def test_every_type_has_tidbs_field_type() -> None:
    ft = {c.name: c.field_type() for c in ALL}
    # pkg/parser/mysql/type.go codes; default lengths from TiDB's DefaultLengthOfMysqlTypes
    assert (ft["ti"].tp, ft["ti"].flen, ft["tiu"].flen, ft["tiu"].unsigned) == (mt.TypeTiny, 4, 3, True)
    assert (ft["mi"].tp, ft["biu"].tp, ft["biu"].flen) == (mt.TypeInt24, mt.TypeLonglong, 20)
    assert (ft["f"].tp, ft["d"].tp) == (mt.TypeFloat, mt.TypeDouble)
    assert (ft["dec"].tp, ft["dec"].flen, ft["dec"].decimal) == (mt.TypeNewDecimal, 30, 10)
    assert (ft["dtm"].tp, ft["dtm"].flen, ft["dtm"].decimal) == (mt.TypeDatetime, 26, 6)
    assert (ft["ts"].tp, ft["ts"].flen, ft["tm"].tp, ft["tm"].flen) == (mt.TypeTimestamp, 23, mt.TypeDuration, 13)
    assert (ft["c"].tp, ft["c"].binary, ft["b"].tp, ft["b"].binary) == (mt.TypeString, False, mt.TypeString, True)
    assert (ft["vb"].tp, ft["vb"].collate, ft["tt"].tp, ft["lb"].tp) == (mt.TypeVarchar, "binary", mt.TypeTinyBlob,
                                                                         mt.TypeLongBlob)
    assert ft["t"].flag & mt.BlobFlag and not ft["t"].binary and ft["bl"].binary
    assert (ft["e"].tp, ft["e"].elems, ft["s"].tp) == (mt.TypeEnum, ("small", "Medium", "large"), mt.TypeSet)
    assert (ft["bt"].tp, ft["bt"].flen, ft["j"].tp, ft["y"].tp) == (mt.TypeBit, 12, mt.TypeJSON, mt.TypeYear)
    assert [c.sql_type for c in ALL[:2]] == ["TINYINT", "TINYINT UNSIGNED"]
    assert (ALL[13].sql_type, ALL[28].sql_type, ALL[30].sql_type) == ("TIMESTAMP(3)", "ENUM('small','Medium','large')",
                                                                      "BIT(12)")
    # TiDB v8.4+ VECTOR: TypeTiDBVectorFloat32 (0xe1), flen the dimension or unspecified, the binary charset and
    # BinaryFlag (ddl processColumnFlags: a binary-charset string kind); CompactStr prints VECTOR alone unspecified.
    assert (ft["v"].tp, ft["v"].flen, ft["v"].decimal, ft["v"].collate, ft["v"].flag & mt.BinaryFlag) == (
        0xE1, 3, 0, "binary", mt.BinaryFlag)
    assert (ft["w"].flen, ALL[32].sql_type, ALL[33].sql_type) == (mt.UnspecifiedLength, "VECTOR(3)", "VECTOR")
    assert (ft["dw"].flen, ft["dw"].decimal, ALL[34].sql_type) == (65, 30, "DECIMAL(65,30)")


def test_every_type_round_trips_through_a_tidb_row() -> None:
    t = table()
    values = {c.name: c.convert(SAMPLE[c.name]) for c in ALL}
    assert values["e"] == "Medium" and values["s"] == "a,c" and values["bt"] == b"\x0a\xbc"
    assert values["j"] == '{"a": {"z": "ü"}, "b": [1, 2.5, null, true]}'  # keys sorted as TiDB's binary JSON
    assert values["b"] == b"\x00\x01\x00\x00"  # BINARY(4) pads with 0x00
    assert values["tm"] == -dt.timedelta(hours=838, minutes=59, seconds=59)
    assert values["f"] == 1.5 and values["biu"] == (1 << 64) - 1
    row = encode_row(t, {c.id: values[c.name] for c in ALL})
    assert t.decode_values(decode_row(t, row)) == values
    # The JSON form reads back to the same value (JSON rows, table-info defaults).
    assert {c.name: c.convert(json_value(values[c.name])) for c in ALL} == values
    # The Arrow value reads back too (snapshot load writes it, the e2e tests read Delta through it).
    assert {c.name: c.from_arrow(c.arrow_value(values[c.name])) for c in ALL} == values


@pytest.mark.parametrize(("col", "value", "expected"), [
    (Column(1, "x", "tinyint"), "1.5", 2), (Column(1, "x", "int"), Decimal("-2.5"), -3),
    (Column(1, "x", "float"), 0.1, struct.unpack("<f", struct.pack("<f", 0.1))[0]),
    (Column(1, "x", "double"), -0.0, 0.0), (Column(1, "x", "decimal", precision=5, scale=2), "1.005", Decimal("1.01")),
    (Column(1, "x", "datetime"), "2024-01-01 00:00:00.5", dt.datetime(2024, 1, 1, 0, 0, 1)),
    (Column(1, "x", "datetime", fsp=6), dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2))),
     dt.datetime(2023, 12, 31, 22)),
    (Column(1, "x", "date"), "2024-1-2", dt.date(2024, 1, 2)),
    (Column(1, "x", "time"), 123456, dt.timedelta(hours=12, minutes=34, seconds=56)),
    (Column(1, "x", "time", fsp=1), "1 02:00:00.25", dt.timedelta(days=1, hours=2, microseconds=300000)),
    (Column(1, "x", "year"), "69", 2069), (Column(1, "x", "year"), 70, 1970), (Column(1, "x", "year"), 0, 0),
    (Column(1, "x", "char", length=3), "ab  ", "ab"), (Column(1, "x", "binary", length=2), "a", b"a\0"),
    (Column(1, "x", "enum", elems=("a", "b")), 2, "b"), (Column(1, "x", "set", elems=("a", "b")), 3, "a,b"),
    (Column(1, "x", "set", elems=("a", "b")), "", ""), (Column(1, "x", "bit", length=8), b"\x05", b"\x05"),
    (Column(1, "x", "json"), "[1, {}]", "[1, {}]"), (Column(1, "x", "json"), "null", "null"),
])
def test_conversions_follow_mysql(col: Column, value: Any, expected: Any) -> None:
    assert col.convert(value) == expected


@pytest.mark.parametrize(("col", "value", "error"), [
    (Column(1, "x", "tinyint", unsigned=True), -1, "out of range"),
    (Column(1, "x", "mediumint"), 1 << 23, "out of range"),
    (Column(1, "x", "bigint", unsigned=True), 1 << 64, "out of range"),
    (Column(1, "x", "float"), 1e39, "out of range for FLOAT"),
    (Column(1, "x", "double"), "nan", "not a finite number"),
    (Column(1, "x", "decimal", precision=4, scale=2), "100", "does not fit"),
    (Column(1, "x", "decimal", precision=4, scale=2, unsigned=True), "-1", "UNSIGNED"),
    (Column(1, "x", "date"), "2024-02-30", "Incorrect date value"),
    (Column(1, "x", "date"), "2024-02-03 01:00:00", "time of day"),
    (Column(1, "x", "timestamp"), "1969-12-31 23:59:59", "TIMESTAMP's range"),
    (Column(1, "x", "time"), "839:00:00", "TIME's range"), (Column(1, "x", "time"), "12:61:00", "0..59"),
    (Column(1, "x", "year"), 1900, "YEAR's range"),
    (Column(1, "x", "varchar", length=2), "abc", "too long"), (Column(1, "x", "tinytext"), "x" * 256, "too long"),
    (Column(1, "x", "tinyblob"), b"x" * 256, "too long"), (Column(1, "x", "binary", length=1), "ab", "too long"),
    (Column(1, "x", "enum", elems=("a",)), "b", "not one of"), (Column(1, "x", "enum", elems=("a",)), 2, "index"),
    (Column(1, "x", "set", elems=("a",)), "a,z", "not one of"), (Column(1, "x", "bit", length=4), 16, "BIT(4)"),
    (Column(1, "x", "json"), "{nope", "invalid JSON"), (Column(1, "x", "text"), b"\xff", "not UTF-8"),
])
def test_values_that_do_not_fit_are_errors_naming_the_column(col: Column, value: Any, error: str) -> None:
    with pytest.raises(SchemaError, match=re.escape(error)) as info:
        col.convert(value)
    assert "column 'x'" in str(info.value)


@pytest.mark.parametrize(("kw", "error"), [
    ({"type": "decimal", "precision": 66}, "precision 1..65"), ({"type": "varchar"}, "needs a length"),
    ({"type": "char", "length": 256}, "0..255"), ({"type": "bit", "length": 65}, "1..64"),
    ({"type": "datetime", "fsp": 7}, "0..6"), ({"type": "enum"}, "needs members"),
    ({"type": "set", "elems": ("a", "A")}, "duplicate"), ({"type": "varchar", "length": 3, "unsigned": True},
                                                          "UNSIGNED"),
    ({"type": "geometry"}, "unsupported type"),
])
def test_bad_definitions_are_refused(kw: dict[str, Any], error: str) -> None:
    with pytest.raises(SchemaError, match=error):
        Column(1, "x", **kw)


def test_table_info_json_keeps_every_type() -> None:
    t = table()
    cols = tuple(Column(c.id, c.name, c.type, default=c.convert(SAMPLE[c.name]), length=c.length,
                        precision=c.precision, scale=c.scale, unsigned=c.unsigned, fsp=c.fsp, elems=c.elems)
                 for c in ALL)
    t = TableInfo(id=t.id, db_name=t.db_name, name=t.name, columns=cols, max_column_id=len(cols))
    assert TableInfo.from_json(t.to_json()) == t


def test_arrow_types_are_the_documented_ones() -> None:
    import pyarrow as pa

    types = {c.name: c.arrow_type() for c in ALL}
    assert (types["ti"], types["tiu"], types["mi"], types["iu"], types["biu"]) == (
        pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.decimal128(20, 0))
    assert (types["f"], types["d"], types["dt"], types["ts"], types["tm"]) == (
        pa.float32(), pa.float64(), pa.date32(), pa.timestamp("us", tz="UTC"), pa.int64())
    assert (types["y"], types["c"], types["b"], types["bt"], types["e"], types["j"]) == (
        pa.int16(), pa.string(), pa.binary(), pa.binary(), pa.string(), pa.string())
    assert {c.spark_type() for c in ALL} >= {"TINYINT", "DECIMAL(20,0)", "TIMESTAMP", "TIMESTAMP_NTZ", "BINARY"}
    # VECTOR: a list of float32 (Delta's array<float>, its element field named as Delta names it); a DECIMAL wider
    # than Arrow's 38 digits: its text.
    assert (str(types["v"]), types["w"], types["dw"]) == ("list<element: float>", types["v"], pa.string())
    assert (ALL[32].spark_type(), ALL[34].spark_type(), ALL[10].spark_type()) == ("ARRAY<FLOAT>", "STRING",
                                                                                  "DECIMAL(30,10)")


def test_the_silver_table_follows_only_widening_changes() -> None:
    def c(type_: str, **kw: Any) -> Column:
        return Column(1, "x", type_, **kw)

    assert ct.delta_widens(c("tinyint"), c("smallint"))
    assert ct.delta_widens(c("tinyint", unsigned=True), c("smallint"))
    assert not ct.delta_widens(c("int"), c("int", unsigned=True))
    assert not ct.delta_widens(c("bigint"), c("int"))
    assert ct.delta_widens(c("int", unsigned=True), c("bigint"))
    assert ct.delta_widens(c("float"), c("double")) and not ct.delta_widens(c("double"), c("float"))
    assert ct.delta_widens(c("decimal", precision=5, scale=2), c("decimal", precision=7, scale=3))
    assert not ct.delta_widens(c("decimal", precision=5, scale=2), c("decimal", precision=5, scale=3))
    assert ct.delta_widens(c("decimal", precision=20, scale=2), c("decimal", precision=50, scale=2))
    # held as text from 50 digits on: a wider scale is reprinted by the rewrite (spark_jobs.ddl_apply)
    assert ct.delta_widens(c("decimal", precision=20, scale=2), c("decimal", precision=50, scale=4))
    assert not ct.delta_widens(c("decimal", precision=50, scale=4), c("decimal", precision=50, scale=3))
    assert not ct.delta_widens(c("vector", length=3), c("vector"))
    assert ct.members_appended(c("enum", elems=("a",)), c("enum", elems=("a", "b")))
    assert not ct.members_appended(c("enum", elems=("a", "b")), c("enum", elems=("b", "a")))


@settings(max_examples=200, deadline=None)
@given(st.integers(-(1 << 63), (1 << 63) - 1), st.floats(allow_nan=False, allow_infinity=False, width=32),
       st.timedeltas(min_value=-ct.MAX_TIME, max_value=ct.MAX_TIME), st.binary(max_size=8),
       st.sets(st.sampled_from(["a", "b", "c"])), st.recursive(
           st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1) | st.text(max_size=5),
           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
           max_leaves=8))
def test_values_round_trip_through_rows_json_and_arrow(i: int, f: float, tm: dt.timedelta, b: bytes,
                                                       members: set[str], doc: Any) -> None:
    import json

    cols = (Column(1, "i", "bigint"), Column(2, "f", "float"), Column(3, "tm", "time", fsp=6),
            Column(4, "vb", "varbinary", length=8), Column(5, "s", "set", elems=("a", "b", "c")),
            Column(6, "j", "json"))
    t = TableInfo(id=1, db_name="d", name="t", columns=cols, max_column_id=6)
    raw = {"i": i, "f": f, "tm": tm, "vb": b, "s": ",".join(members), "j": json.dumps(doc)}
    values = {c.name: c.convert(raw[c.name]) for c in cols}
    assert t.decode_values(decode_row(t, encode_row(t, {c.id: values[c.name] for c in cols}))) == values
    assert {c.name: c.convert(json_value(values[c.name])) for c in cols} == values
    assert {c.name: c.from_arrow(c.arrow_value(values[c.name])) for c in cols} == values


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_an_int_or_a_string_reads_back_as_convert_stored_it(data: st.DataObject) -> None:
    """``from_stored`` takes an integer, or a string's UTF-8 bytes, as stored: the same value ``convert`` stored,
    through the row codec and back (CHAR without its trailing spaces)."""
    col = data.draw(st.sampled_from([c for c in ALL if c.kind in (ct.INT, ct.TEXT)]))
    if col.kind == ct.INT:
        lo, hi = ct._int_range(col)
        value: Any = data.draw(st.integers(lo, hi))
    else:
        limit = col.length or 16
        value = data.draw(st.text(st.characters(blacklist_categories=("Cs",)), max_size=min(limit, 16)))
    stored = col.convert(value)
    t = TableInfo(id=1, db_name="d", name="t", columns=(col,), max_column_id=col.id)
    raw = decode_row(t, encode_row(t, {col.id: col.to_stored(stored)}))
    assert col.from_stored(raw[col.id]) == stored == ct.convert(col, raw[col.id])


# --- VECTOR, DECIMAL(65), zero and invalid dates ------------------------------------------------------------------

ZERO, MySQLTime = ct.rowcodec.ZERO_TIME, ct.rowcodec.MySQLTime
DATE, DATETIME, TS = Column(1, "d", "date"), Column(1, "d", "datetime", fsp=3), Column(1, "d", "timestamp")
PERMISSIVE = ct.DateRules.of_sql_mode([])  # SET sql_mode = ''


def test_vector_values_are_parsed_checked_and_printed_as_tidb_does() -> None:
    v3, v = Column(1, "v", "vector", length=3), Column(1, "v", "vector")
    got = v3.convert(" [1, 2.5, -0] ")
    assert got.text() == "[1,2.5,-0]" and v3.convert([1, 2.5, -0.0]) == got and v3.convert(got) == got
    assert json_value(got) == "[1,2.5,-0]" and v3.convert(json_value(got)) == got
    assert v.convert("[]").elements == () and len(v.convert("[" + ",".join(["1"] * 100) + "]")) == 100
    for value, message in (("[1,2]", "vector has 2 dimensions, does not fit VECTOR(3)"),
                           ("[1,2,NaN]", "Invalid vector text"), ("[1,2,1e40]", "value 1e+40 out of range for float32"),
                           ("null", "Invalid vector text: null"), (7, "7 is not a vector")):
        with pytest.raises(SchemaError, match=re.escape(f"column 'v' (VECTOR(3)): {message}")):
            v3.convert(value)
    with pytest.raises(SchemaError, match="more than 16383 dimensions"):
        Column(1, "v", "vector", length=16384)
    with pytest.raises(SchemaError, match="UNSIGNED"):
        Column(1, "v", "vector", unsigned=True)
    assert v3.arrow_value(got) == [1.0, 2.5, -0.0] and v3.from_arrow([1.0, 2.5, -0.0]) == got


def test_decimal_65_30_keeps_65_digits_and_prints_its_scale() -> None:
    col = Column(1, "x", "decimal", precision=65, scale=30)
    text = "99999999999999999999999999999999999.999999999999999999999999999999"
    assert format(col.convert(text), "f") == text and format(col.convert("-" + text), "f") == "-" + text
    assert col.convert("1.0000000000000000000000000000005") == Decimal("1.000000000000000000000000000001")  # half up
    with pytest.raises(SchemaError, match="does not fit DECIMAL"):
        col.convert("1" + "0" * 35)
    assert ct.decimal_as_text(col) and not ct.decimal_as_text(Column(1, "x", "decimal", precision=38, scale=2))
    assert col.arrow_value(col.convert("-0.5")) == "-0.5" + "0" * 29
    assert col.arrow_value(col.convert("-0")) == "0." + "0" * 30  # no -0, as TiDB prints it
    assert ct.decimal_text(Decimal("12.5"), 0) == "13" and col.from_arrow(col.arrow_value(col.convert(text))) == \
        col.convert(text)


@pytest.mark.parametrize(("modes", "col", "value", "expected"), [
    # sql_mode '': the zero date, a zero month or day are stored as written; Feb 30 becomes the zero date.
    ((), DATE, "0000-00-00", ZERO), ((), DATETIME, "0000-00-00 00:00:00", ZERO), ((), TS, "0000-00-00 00:00:00", ZERO),
    ((), DATE, "2021-00-15", MySQLTime(2021, 0, 15)), ((), DATETIME, "2021-05-00 10:11:12.3456",
                                                        MySQLTime(2021, 5, 0, 10, 11, 12, 346000)),
    ((), DATE, "2021-02-30", ZERO), ((), TS, "2021-02-30 00:00:00", ZERO), ((), TS, "1960-01-01 00:00:00", ZERO),
    ((), DATE, "0000-01-01", MySQLTime(0, 1, 1)), ((), DATE, "2021-13-01", ZERO),
    # ALLOW_INVALID_DATES: a day up to 31 in any month; TIMESTAMP still takes none.
    (("ALLOW_INVALID_DATES",), DATE, "2021-02-30", MySQLTime(2021, 2, 30)),
    (("ALLOW_INVALID_DATES", "STRICT_TRANS_TABLES"), DATETIME, "2021-04-31 01:02:03",
     MySQLTime(2021, 4, 31, 1, 2, 3)),
    # NO_ZERO_DATE / NO_ZERO_IN_DATE without strict mode: stored as the zero date (TiDB warns).
    (("NO_ZERO_DATE",), DATE, "0000-00-00", ZERO), (("NO_ZERO_IN_DATE",), DATE, "2021-00-01", ZERO),
    # strict mode alone: the zero date and zero parts are taken (NO_ZERO_DATE / NO_ZERO_IN_DATE are what refuse)
    (("STRICT_TRANS_TABLES",), DATE, "0000-00-00", ZERO), (("STRICT_ALL_TABLES",), DATE, "2021-00-01",
                                                           MySQLTime(2021, 0, 1)),
    ((), DATE, "2024-02-29", dt.date(2024, 2, 29)), ((), DATETIME, "2024-02-29 10:00:00.0005",
                                                      dt.datetime(2024, 2, 29, 10, 0, 0, 1000)),
])
def test_zero_and_invalid_dates_follow_the_sql_mode_as_tidb(modes: tuple[str, ...], col: Column, value: str,
                                                            expected: Any) -> None:
    # TiDB pkg/table/column.go handleZeroDatetime after pkg/types/time.go checkDateType / checkMonthDay
    assert col.convert(value, ct.DateRules.of_sql_mode(modes)) == expected


@pytest.mark.parametrize(("modes", "col", "value", "why"), [
    (None, DATE, "0000-00-00", "the zero date under NO_ZERO_DATE and strict mode"),  # TiDB's default sql_mode
    (None, DATETIME, "2021-00-05 00:00:00", "a zero month or day under NO_ZERO_IN_DATE and strict mode"),
    (None, DATE, "2021-02-30", "28 days in that month"), (None, DATE, "2024-13-01", "not a date"),
    (("STRICT_TRANS_TABLES",), TS, "2021-00-01 00:00:00", "no TIMESTAMP"),
    (("STRICT_TRANS_TABLES", "NO_ZERO_DATE"), TS, "0000-00-00 00:00:00", "the zero date"),
])
def test_strict_mode_refuses_them_with_tidbs_incorrect_value_text(modes: tuple[str, ...] | None, col: Column,
                                                                  value: str, why: str) -> None:
    rules = ct.STRICT_DATES if modes is None else ct.DateRules.of_sql_mode(modes)
    kind = {"date": "date", "datetime": "datetime", "timestamp": "timestamp"}[col.type]
    with pytest.raises(SchemaError, match=re.escape(f"Incorrect {kind} value: {value!r} ({why}")):
        col.convert(value, rules)


def test_stored_zero_dates_read_back_print_and_map_to_null_in_the_lake() -> None:
    t = TableInfo(id=5, db_name="d", name="z", columns=(Column(1, "d", "date"), Column(2, "t", "datetime", fsp=2)))
    values = {"d": ZERO, "t": MySQLTime(2021, 2, 30, 1, 2, 3, 450000)}
    assert t.decode_values(decode_row(t, encode_row(t, {1: ZERO, 2: values["t"]}))) == values  # TiDB's packed zero
    assert json_value(values["t"]) == "2021-02-30 01:02:03.450000"
    assert t.columns[1].convert(json_value(values["t"]), ct.STORED_DATES) == values["t"]
    assert t.columns[0].convert("0000-00-00", ct.STORED_DATES) == ZERO  # what a client reads back over SQL
    for c in t.columns:
        assert ct.maps_to_null(c, values[c.name]) and c.arrow_value(values[c.name]) is None
    assert not ct.maps_to_null(DATE, dt.date(1, 1, 1)) and DATE.arrow_value(dt.date(1, 1, 1)) == dt.date(1, 1, 1)
    with pytest.raises(SchemaError, match="Incorrect date value"):  # the strict default, as a write under it
        t.columns[0].convert(ZERO)
    with_default = Column(3, "z", "date", default=ZERO)
    assert TableInfo.from_json(TableInfo(6, "d", "y", (with_default,)).to_json()).columns[0].default == ZERO
