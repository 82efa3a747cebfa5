"""The structural expectations of many tables' rows -- Delta key unique, NOT NULL columns without NULLs, unique indexes
unique -- validated by Great Expectations in one run for all of them.

The window checks hold, on the driver, the Delta rows at each touched table's changed keys. Validating each table on
its own costs a GX run per table and a GX expectation per key, NOT NULL column and unique index of each: GX builds a
metric graph per expectation, tens of milliseconds of Python whatever the rows, so a window touching fifty tables
spent seconds of the driver's GIL on it. Here the tables' rows become two frames, and the number of expectations no
longer grows with the number of tables:

- the **key frame**, a row per Delta row: ``key``, the tuple ``(table number, key values...)``, expected unique;
  ``index_<j>``, the tuple ``(table number, j, values...)`` of the table's ``j``-th other unique index, expected
  unique, NULL when a value is NULL (a MySQL unique index lets such rows repeat; GX leaves NULLs out of column map
  expectations as it does for the per-table expectation);
- the **NOT NULL frame**, a row per value of a NOT NULL column: ``value``, the value's validity (True, or NULL where
  the value is NULL: Arrow's validity bitmap, no value converted), expected not NULL.

Every table passes when both frames pass. When one fails, each table is validated on its own
(:func:`spark_jobs.checks.data_quality.validate_arrow`) to name the ones that fail; the window checks then check those
in Spark, whose report names the keys.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from spark_jobs.checks import data_quality as dq

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from cdc_core.schema.model import TableInfo

log = logging.getLogger(__name__)


def _key_frame(tables: list[tuple[TableInfo, pa.Table]]) -> pd.DataFrame:
    import pandas as pd

    keys: list[tuple[Any, ...]] = []
    indexes: dict[int, list[tuple[Any, ...] | None]] = {}
    for n, (table, rows) in enumerate(tables):
        key = [rows.column(k).to_pylist() for k in table.delta_key()]
        keys.extend(zip([n] * rows.num_rows, *key, strict=True))
        for j, (_, cols) in enumerate(dq._other_unique_indexes(table)):
            # Earlier tables had fewer indexes: their rows hold NULL in this column, which GX leaves out.
            column = indexes.setdefault(j, [None] * (len(keys) - rows.num_rows))
            values = zip(*(rows.column(c).to_pylist() for c in cols), strict=True)
            column.extend(None if None in v else (n, j, *v) for v in values)
        for column in indexes.values():
            column.extend([None] * (len(keys) - len(column)))
    frame = {"key": pd.Series(keys, dtype=object)}
    frame.update({f"index_{j}": pd.Series(v, dtype=object) for j, v in indexes.items()})
    return pd.DataFrame(frame)


def _not_null_frame(tables: list[tuple[TableInfo, pa.Table]]) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.compute as pc

    valid: list[pa.Array | pa.ChunkedArray] = [pa.array([], pa.bool_())]
    for table, rows in tables:
        for c in dq.not_null_columns(table):
            values = rows.column(c.name)
            ok = pc.is_valid(values)
            if pa.types.is_floating(values.type):  # pandas, and so GX on a table's own frame, takes NaN for NULL
                ok = pc.and_(ok, pc.invert(pc.fill_null(pc.is_nan(values), False)))
            valid.append(pc.if_else(ok, True, pa.scalar(None, pa.bool_())))
    chunks = [chunk for v in valid for chunk in (v.chunks if isinstance(v, pa.ChunkedArray) else [v])]
    return pa.table({"value": pa.chunked_array(chunks, pa.bool_())}).to_pandas()


def _frames_pass(tables: list[tuple[TableInfo, pa.Table]]) -> bool:
    import great_expectations.expectations as gxe

    key_frame = _key_frame(tables)
    expectations = [gxe.ExpectColumnValuesToBeUnique(column=c) for c in key_frame.columns]
    if not all(r.success for r in dq._validate(key_frame, expectations, result_format="BOOLEAN_ONLY")):
        return False
    null_frame = _not_null_frame(tables)
    if not len(null_frame):
        return True
    (r,) = dq._validate(null_frame, [gxe.ExpectColumnValuesToNotBeNull(column="value")],
                        result_format="BOOLEAN_ONLY")
    return bool(r.success)


def failing(tables: Mapping[str, tuple[TableInfo, pa.Table]]) -> set[str]:
    """The names (keys of ``tables``) of the tables whose rows (``(table, rows)``: rows holding at least
    :func:`spark_jobs.checks.data_quality.structural_columns`) fail a structural expectation. A table GX cannot validate
    (an error, logged) is named too: the caller checks it again, in Spark."""
    entries = list(tables.values())
    try:
        if not entries or _frames_pass(entries):
            return set()
    except Exception:
        log.warning("one GX run over %d tables failed; validating each alone", len(entries), exc_info=True)
    bad: set[str] = set()
    for name, (table, rows) in tables.items():
        try:
            named = dq.structural_expectations(table)
            if all(r.success for r in dq.validate_arrow(rows, table, named).values()):
                continue
        except Exception:
            log.warning("GX could not validate %s on the driver", name, exc_info=True)
        bad.add(name)
    return bad


def passed_results(table: TableInfo) -> list[dq.ExpectationResult]:
    """The structural results of a table that passed: the per-table run's result builders
    (:func:`spark_jobs.checks.data_quality.structural_results` after the key's) given a passing GX result each."""
    passed = SimpleNamespace(success=True, result={})  # what a passing GX result holds at BOOLEAN_ONLY
    got: defaultdict[str, Any] = defaultdict(lambda: passed)
    return [dq._uniqueness_result(passed, table), *dq.structural_results(got, None, table)]
