"""TiDB's KEY partitioning hash against TiDB's own expectations: the rows ``SELECT count(*) FROM t PARTITION(pN)``
finds in each of 4 partitions, and the partition a point read prunes to, in ``pkg/table/tables/partition_test.go``
(``TestKeyPartitionTableBasic``, ``TestKeyPartitionTableAllFeildType``) -- one column and several, integers,
DECIMAL(12,4), FLOAT, DOUBLE, BIT(8), DATE, DATETIME, YEAR, CHAR, VARCHAR, BINARY(16), VARBINARY, ENUM, SET; then
NULL and what is refused."""

from __future__ import annotations

import datetime as dt
import zlib
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from cdc_core.schema.model import Column
from cdc_core.schema.partition import PartitionError
from cdc_core.schema.partition_hash import check_key_column, hash_key, key_partition


def counts(cols: list[Column], rows: list[tuple[Any, ...]], n: int = 4) -> list[int]:
    """Rows per partition p0..p(n-1), each row's values converted by its column as the upstream writes them."""
    c = Counter(key_partition(cols, [col.convert(v) for col, v in zip(cols, row, strict=True)], n) for row in rows)
    return [c[i] for i in range(n)]


def part_of(cols: list[Column], *values: Any) -> int:
    return key_partition(cols, [c.convert(v) for c, v in zip(cols, values, strict=True)], 4)


INT = Column(1, "col3", "int", nullable=False)
COL1 = Column(2, "col1", "int", nullable=False)


def test_one_and_two_integer_columns() -> None:
    # tkey0: KEY(col3) PARTITIONS 4 over 1..4 -> p0 1, p1 1, p2 0, p3 2; col3 = 3 in p3, 3 or 4 in p0,p3
    assert counts([INT], [(1,), (2,), (3,), (4,)]) == [1, 1, 0, 2]
    assert part_of([INT], 3) == 3 and part_of([INT], 4) == 0
    # tkey7: KEY(col3, col1): the columns in the partitioning's order, not the table's
    rows7 = [(1, 1), (2, 1), (2, 2), (3, 3), (4, 4), (5, 4)]  # (col3, col1)
    assert counts([INT, COL1], rows7) == [2, 2, 1, 1]
    assert part_of([INT, COL1], 3, 3) == 1
    rows8 = [(111, 1), (2, 1), (218, 2), (3, 3), (4, 4), (5, 4), (5, 5), (50, 5), (62, 6), (6, 60), (50, 70),
             (62, 80), (62, 100), (6, 2000), (50, 400), (62, 90)]
    assert counts([INT, COL1], rows8) == [4, 7, 3, 2]


CITIES = [(1, "nanjing", "025"), (2, "huaian", "0517"), (3, "zhenjiang", "0518"), (4, "changzhou", "0519"),
          (5, "wuxi", "0511"), (6, "suzhou", "0512"), (7, "xuzhou", "0513"), (8, "suqian", "0513"),
          (9, "lianyungang", "0514"), (10, "yangzhou", "0515"), (11, "taizhou", "0516"), (12, "nantong", "0520"),
          (13, "yancheng", "0521"), (14, "NANJING", "025"), (15, "HUAIAN", "0527"), (16, "ZHENJIANG", "0529"),
          (17, "CHANGZHOU", "0530")]


def test_strings_and_mixed_columns() -> None:
    v = Column(3, "col3", "varchar", nullable=False, length=12)
    names = ["linpin", "zhangsan", "anqila", "xingtian", "renleifeng", "peilin", "abcdeeg", "rpstdfed"]
    assert counts([v], [(s,) for s in names]) == [1, 1, 2, 4]  # tkey6
    assert part_of([v], "linpin") == 3 and part_of([v], "zhangsan") == 2
    jyrq = Column(1, "JYRQ", "int", nullable=False)
    khh = Column(2, "KHH", "varchar", nullable=False, length=12)
    zjzh = Column(3, "ZJZH", "char", nullable=False, length=14)
    assert counts([khh], [(k,) for _, k, _ in CITIES]) == [5, 4, 2, 6]  # tkey2
    more = [*CITIES, (1, "beijing", "010"), (2, "beijing", "010"), (2, "zzzzwuhan", "027")]
    assert counts([jyrq, khh], [(j, k) for j, k, _ in more]) == [7, 5, 4, 4]  # tkey4
    assert part_of([jyrq, khh], 2, "huaian") == 1
    assert counts([jyrq, khh, zjzh], more) == [6, 3, 3, 8]  # tkey9
    assert part_of([jyrq, khh, zjzh], 2, "huaian", "0517") == 0


def test_numeric_types() -> None:
    # tkey_numeric, PARTITION BY KEY(idN) PARTITIONS 4
    ids1 = [1, 12, 0, 33, 2, 22, 3, 4, 5, 34, 250, 35]
    assert counts([Column(1, "id2", "tinyint")], [(v,) for v in [1, 12, 2, 33, 3, 23, 3, 4, 5, 34, 120, 35]]) == \
        [4, 3, 2, 3]
    assert counts([Column(1, "id6", "int")], [(v,) for v in [1, 12, 2, 33, 3, 23, 4, 5, 5, 34, 258, 35]]) == \
        [4, 3, 3, 2]
    assert counts([Column(1, "id7", "bigint")], [(v,) for v in [1, 12, 2, 33, 3, 23, 4, 5, 5, 34, 348, 35]]) == \
        [3, 3, 4, 2]
    dec = Column(1, "id8", "decimal", precision=12, scale=4)
    decimals = ["1.1", "12.1", "2.78", "33.78", "3.78", "32.78", "4.78", "5.78", "5.78", "34.78", "38.78", "35.78"]
    assert counts([dec], [(x,) for x in decimals]) == [3, 3, 2, 4]  # hashed as 1.1000: the column's scale
    assert part_of([dec], "1.1") == 1 and part_of([dec], "33.78") == 0
    floats = [120.1, 1220.1, 16.78, 336.78, 26.78, 26.72, 46.48, 56.48, 56.48, 346.78, 186.48, 356.48]
    assert counts([Column(1, "id9", "float")], [(x,) for x in floats]) == [2, 4, 3, 3]  # float32's shortest digits
    doubles = [367.45, 3267.45, 17.25, 37.25, 417.25, 27.15, 89.35, 59.35, 59.35, 34.25, 719.35, 35.35]
    assert counts([Column(1, "id10", "double")], [(x,) for x in doubles]) == [3, 4, 2, 3]
    # BIT(8) hashes its byte; cdcflow refuses KEY over BIT (see below) but the bytes are the same
    crcs = Counter(zlib.crc32(bytes([v])) % 4 for v in ids1)
    assert [crcs[i] for i in range(4)] == [2, 3, 2, 5]


DAYS = ["2012-04-10", "2013-05-11", "2014-06-12", "2015-07-13", "2021-08-14", "2022-12-23", "2023-01-12",
        "2018-07-13", "1980-01-30", "1980-03-30"]
TIMES = ["12:12:12", "13:13:13", "14:14:14", "15:15:15", "16:16:16", "23:12:15", "20:38:14", "07:15:15",
         "00:12:15", "00:13:15"]


def test_date_and_time_types() -> None:
    d = Column(1, "id1", "date")
    assert counts([d], [(x,) for x in DAYS]) == [1, 3, 4, 2]
    assert part_of([d], "2012-04-10") == 0 and part_of([d], "2018-07-13") == 2
    t = Column(3, "id3", "datetime")
    assert counts([t], [(f"{a} {b}",) for a, b in zip(DAYS, TIMES, strict=True)]) == [3, 4, 0, 3]
    assert part_of([t], "2012-04-10 12:12:12") == 1 and part_of([t], "2021-08-14 16:16:16") == 3
    assert counts([Column(5, "id5", "year")], [(int(x[:4]),) for x in DAYS]) == [3, 3, 2, 2]
    # DATETIME(fsp) hashes fsp fraction digits, TIME [-]HH:MM:SS (Time.String / Duration.String)
    assert hash_key(Column(6, "f", "datetime", fsp=3), dt.datetime(2024, 1, 2, 3, 4, 5, 120000)) == \
        b"2024-01-02 03:04:05.120"
    assert hash_key(Column(7, "t", "time", fsp=2), -dt.timedelta(hours=1, microseconds=500000)) == b"-01:00:00.50"
    assert hash_key(Column(8, "y", "decimal", precision=5, scale=2), Decimal("-0.00")) == b"0.00"


def test_string_family() -> None:
    cities = ["huaian", "nanjing", "zhenjiang", "suzhou", "wuxi"]
    for col in (Column(1, "id1", "char", length=16), Column(2, "id2", "varchar", length=16),
                Column(4, "id4", "varbinary", length=16)):
        assert counts([col], [(c,) for c in cities]) == [2, 0, 0, 3], col.type
    b16 = Column(3, "id3", "binary", length=16)  # padded with 0x00 to 16 bytes, and hashed so
    assert counts([b16], [(c,) for c in cities]) == [2, 1, 1, 1]
    assert part_of([b16], "suzhou") == 0 and part_of([b16], "nanjing") == 1
    enum = Column(7, "id7", "enum", elems=("x-small", "small", "medium", "large", "x-large"))
    assert counts([enum], [(e,) for e in enum.elems]) == [1, 1, 1, 2]
    assert part_of([enum], "x-small") == 0 and part_of([enum], "large") == 2
    s = Column(8, "id8", "set", elems=("a", "b", "c", "d"))
    assert counts([s], [(x,) for x in "abcda"]) == [1, 1, 0, 3]
    # utf8mb4_bin's key drops trailing spaces: 'a ' and 'a' are one key, as they are one UNIQUE value
    v = Column(9, "v", "varchar", length=8)
    assert hash_key(v, "a  ") == b"a" and hash_key(b16, b16.convert(b"a ")) == b"a " + b"\0" * 14


def test_null_is_the_byte_zero() -> None:
    # LocateKeyPartition writes 0x00 for a NULL, then the next column's key
    assert key_partition([INT], [None], 7) == zlib.crc32(b"\x00") % 7
    assert key_partition([INT, COL1], [None, 12], 5) == zlib.crc32(b"\x0012") % 5
    # the keys are written one after the other: (1, 2) is b"12" and (12, NULL) b"12\x00"
    assert key_partition([INT, COL1], [1, 2], 4) == zlib.crc32(b"12") % 4 == 1
    assert key_partition([INT, COL1], [12, None], 4) == zlib.crc32(b"12\x00") % 4 == 0


@pytest.mark.parametrize(("type_name", "why"), [
    ("text", "is of a not allowed type"), ("blob", "is of a not allowed type"), ("json", "is of a not allowed type"),
    ("timestamp", "session's time zone"), ("bit", "collation")])
def test_columns_it_refuses(type_name: str, why: str) -> None:
    with pytest.raises(PartitionError, match=why):
        check_key_column(Column(1, "c", type_name))
    check_key_column(Column(1, "c", "tinytext"))  # TypeTinyBlob: TiDB takes it
