"""The structural expectations of many tables in one GX run name the tables each table's own run fails, and report a
passing table as its own run does."""

from __future__ import annotations

import random
from dataclasses import asdict
from decimal import Decimal

import pyarrow as pa

from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.checks import data_quality as dq
from spark_jobs.checks import structural_checks


def _int_keyed(n: int) -> TableInfo:
    """``id`` PRIMARY KEY, ``v`` NOT NULL, ``email`` UNIQUE, ``(a, b)`` UNIQUE (all three others nullable)."""
    return TableInfo(
        id=400 + n, db_name="s", name=f"t{n}",
        columns=(Column(1, "id", "bigint", nullable=False), Column(2, "v", "varchar", length=8, nullable=False),
                 Column(3, "email", "varchar", length=16), Column(4, "a", "int"), Column(5, "b", "int")),
        indexes=(Index("PRIMARY", ("id",), unique=True, primary=True), Index("uk_email", ("email",), unique=True),
                 Index("uk_ab", ("a", "b"), unique=True)),
    )  # fmt: skip


def _composite(n: int) -> TableInfo:
    """``(d, s)`` PRIMARY KEY (DECIMAL, VARCHAR), no other index, every column NOT NULL."""
    return TableInfo(
        id=500 + n, db_name="s", name=f"c{n}",
        columns=(Column(1, "d", "decimal", precision=8, scale=2, nullable=False),
                 Column(2, "s", "varchar", length=8, nullable=False), Column(3, "w", "int", nullable=False)),
        indexes=(Index("PRIMARY", ("d", "s"), unique=True, primary=True),),
    )  # fmt: skip


def _rowid(n: int) -> TableInfo:
    """No key of its own: ``_tidb_rowid``; one nullable column, no index."""
    return TableInfo(id=600 + n, db_name="s", name=f"r{n}", columns=(Column(1, "x", "int"),))


def _rows(table: TableInfo, rng: random.Random, n: int, faults: set[str]) -> pa.Table:
    """``n`` rows of ``table``, with each fault of ``faults`` ("key", "null", "index") put into one of them."""
    rows = []
    for i in range(n):
        if table.name.startswith("t"):
            rows.append({"id": i, "v": f"v{i}", "email": rng.choice([None, f"e{i}"]), "a": rng.choice([None, i]),
                         "b": rng.choice([None, 7])})  # fmt: skip
        elif table.name.startswith("c"):
            rows.append({"d": Decimal(i) / 4, "s": f"s{i % 3}", "w": i})
        else:
            rows.append({"x": rng.choice([None, i % 5]), "_tidb_rowid": i})
    if n >= 2:
        a, b = rng.sample(range(n), 2)
        key = list(table.delta_key())
        if "key" in faults:
            rows[b].update({k: rows[a][k] for k in key})
        if "null" in faults:
            nn = [c.name for c in table.columns if not c.nullable and c.name not in key]
            if nn:
                rows[b][nn[0]] = None
        if "index" in faults and table.name.startswith("t"):
            rows[a].update(email="dup", a=3, b=3)
            rows[b].update(email="dup") if rng.random() < 0.5 else rows[b].update(a=3, b=3)
    return pa.Table.from_pylist(rows, schema=table.arrow_schema())


def _fails_alone(table: TableInfo, rows: pa.Table) -> bool:
    got = dq.validate_arrow(rows, table, dq.structural_expectations(table))
    return not all(r.success for r in got.values())


def test_one_run_names_the_tables_their_own_runs_fail() -> None:
    rng = random.Random(18)
    for _ in range(12):
        tables: dict[str, tuple[TableInfo, pa.Table]] = {}
        for n in range(rng.randint(1, 6)):
            table = rng.choice([_int_keyed, _composite, _rowid])(n)
            faults = {f for f in ("key", "null", "index") if rng.random() < 0.15}
            tables[table.qualified_name] = (table, _rows(table, rng, rng.randint(0, 40), faults))
        want = {name for name, (t, rows) in tables.items() if _fails_alone(t, rows)}
        assert structural_checks.failing(tables) == want
        # The one run itself passes when every table does (not only the tables validated alone after it).
        assert structural_checks._frames_pass(list(tables.values())) == (not want)


def test_a_key_repeated_across_tables_is_no_duplicate_and_nulls_never_collide_in_an_index() -> None:
    a, b = _int_keyed(1), _int_keyed(2)
    rows = pa.Table.from_pylist([{"id": 1, "v": "x", "email": None, "a": 1, "b": None},
                                 {"id": 2, "v": "y", "email": None, "a": 1, "b": None}], schema=a.arrow_schema())
    assert structural_checks.failing({"a": (a, rows), "b": (b, rows)}) == set()
    assert structural_checks._frames_pass([(a, rows), (b, rows)])
    dup = pa.Table.from_pylist([{"id": 1, "v": "x", "email": None, "a": 1, "b": 2},
                                {"id": 2, "v": "y", "email": None, "a": 1, "b": 2}], schema=a.arrow_schema())
    assert structural_checks.failing({"a": (a, rows), "b": (b, dup)}) == {"b"}
    null = pa.Table.from_pylist([{"id": 3, "v": None, "email": None, "a": None, "b": None}], schema=a.arrow_schema())
    assert structural_checks.failing({"a": (a, null), "b": (b, rows)}) == {"a"}


def test_a_passing_table_is_reported_as_its_own_run_reports_it() -> None:
    for table in (_int_keyed(1), _composite(1), _rowid(1)):
        rows = _rows(table, random.Random(3), 10, set())
        got = dq.validate_arrow(rows, table, dq.structural_expectations(table))
        alone = [dq._uniqueness_result(got["key"], table), *dq.structural_results(got, None, table)]
        assert [asdict(r) for r in structural_checks.passed_results(table)] == [asdict(r) for r in alone]


def test_a_nan_in_a_not_null_float_fails_as_in_the_tables_own_run() -> None:
    t = TableInfo(id=800, db_name="s", name="f", columns=(Column(1, "id", "int", nullable=False),
                                                            Column(2, "x", "double", nullable=False)),
                  indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),))  # fmt: skip
    rows = pa.Table.from_pylist([{"id": 1, "x": 1.5}, {"id": 2, "x": float("nan")}], schema=t.arrow_schema())
    assert _fails_alone(t, rows) and structural_checks.failing({"f": (t, rows)}) == {"f"}


def test_a_table_gx_cannot_validate_is_named_for_spark_and_the_others_still_pass(monkeypatch) -> None:
    a, b = _int_keyed(1), _int_keyed(2)
    rows = _rows(a, random.Random(5), 10, set())
    validate = dq._validate

    def broken(df, expectations, result_format=None):  # GX raises on table b's frame (its ids start at 1000)
        if "id" in df.columns and len(df) and df["id"].iloc[0] >= 1000:
            raise dq.DataQualityError("Great Expectations could not evaluate expect_column_values_to_be_unique")
        return validate(df, expectations, result_format)

    def one_run_fails(tables):
        raise RuntimeError("the combined frame could not be built")

    other = pa.Table.from_pydict({**rows.to_pydict(), "id": [1000 + i for i in range(10)]}, schema=a.arrow_schema())
    monkeypatch.setattr(dq, "_validate", broken)
    monkeypatch.setattr(structural_checks, "_frames_pass", one_run_fails)
    assert structural_checks.failing({"a": (a, rows), "b": (b, other)}) == {"b"}
