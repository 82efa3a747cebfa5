from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pytest

from cdc_core.schema import ddl_history
from cdc_core.schema.model import ROWID_COLUMN, Column, Index, SchemaError, TableInfo


def table(**kw: object) -> TableInfo:
    base: dict[str, object] = dict(
        id=100, db_name="d", name="t",
        columns=(
            Column(1, "id", "bigint", nullable=False),
            Column(2, "name", "varchar", length=8, default="x"),
            Column(3, "price", "decimal", precision=6, scale=2, default=Decimal("1.50")),
            Column(4, "at", "datetime", default=datetime(2024, 1, 2, 3, 4, 5)),
            Column(5, "note", "text"),
        ),
        indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),),
        pk_is_handle=True, schema_version=3, db_id=9, max_column_id=5,
    )
    base.update(kw)
    return TableInfo(**base)  # type: ignore[arg-type]


def test_json_round_trip() -> None:
    t = table(extra={"auto_increment": "id"})
    assert TableInfo.from_json(t.to_json()) == t
    for info in ddl_history.SYSTEM_TABLES:
        assert TableInfo.from_json(info.to_json()) == info


def test_convert_values_and_errors() -> None:
    t = table()
    assert t.column("ID").convert("42") == 42
    assert t.column("price").convert("3.14159") == Decimal("3.14")
    assert t.column("at").convert("2024-01-02") == datetime(2024, 1, 2)
    assert t.column("at").convert("2024-01-02 03:04:05.5") == datetime(2024, 1, 2, 3, 4, 6)  # DATETIME is fsp 0
    assert Column(9, "at6", "datetime", fsp=6).convert("2024-01-02 03:04:05.5") == datetime(2024, 1, 2, 3, 4, 5, 500000)
    cases = [("id", "abc", "not an integer"), ("id", True, "not an integer"), ("id", 1 << 63, "out of range"),
             ("name", "123456789", "too long"), ("price", "12345.6", "does not fit"),
             ("price", "pi", "not a number"), ("at", "soon", "not a date/time")]
    for col, value, msg in cases:
        with pytest.raises(SchemaError, match=msg):
            t.column(col).convert(value)
    with pytest.raises(SchemaError, match="unknown column"):
        t.column("nope")
    with pytest.raises(SchemaError, match="unsupported type"):
        Column(1, "f", "geometry")
    with pytest.raises(SchemaError, match="malformed"):
        TableInfo.from_json("{")


def test_decode_values_uses_defaults_and_drops_unknown_ids() -> None:
    t = table()
    out = t.decode_values({1: 7, 5: "n", 99: "dropped column"})
    assert out == {"id": 7, "name": "x", "price": Decimal("1.50"), "at": datetime(2024, 1, 2, 3, 4, 5), "note": "n"}


def test_delta_key() -> None:
    assert table().delta_key() == ("id",)
    no_pk = table(indexes=(), pk_is_handle=False)
    assert no_pk.delta_key() == (ROWID_COLUMN,)
    assert ROWID_COLUMN in no_pk.arrow_schema().names
    nullable_uk = table(indexes=(Index("u", ("name",), unique=True),), pk_is_handle=False)
    assert nullable_uk.delta_key() == (ROWID_COLUMN,)  # a nullable UK is not a key
    cols = tuple(c if c.name != "name" else Column(2, "name", "varchar", nullable=False, length=8)
                 for c in table().columns)
    nn_uk = table(columns=cols, indexes=(Index("u", ("name",), unique=True),), pk_is_handle=False)
    assert nn_uk.delta_key() == ("name",)
    assert table().handle_column == "id" and no_pk.handle_column is None
