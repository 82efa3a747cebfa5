"""Event filters of a table, evaluated in Spark on the mounted events (seed 003, TiCDC semantics).

A filter is a JSON-able dict (``cdc_core.filter.event_filter`` produces them; the lead's table
matching already chose the filters that apply to a table)::

    {"ignore_event": ["insert" | "update" | "delete", ...],
     "ignore_insert_value_expr": SQL | null,       # on the new row of an insert
     "ignore_update_old_value_expr": SQL | null,   # on the old row of an update
     "ignore_update_new_value_expr": SQL | null,   # on the new row of an update
     "ignore_delete_value_expr": SQL | null}       # on the old row of a delete

An insert is a PUT without an old value, an update a PUT with one, a delete a DELETE. An event is
dropped when any filter ignores its type or any of its expressions for that type is true (NULL
counts as false, as in TiCDC). Independently, every event whose ``start_ts`` is in
``ignore_txn_start_ts`` is dropped.

Expressions are Spark SQL over the table's plain column names. They are evaluated with
``F.expr`` in two projections of the mounted frame: one where the plain names are the new image's
fields, one where they are the old image's. The event's own columns are packed into one struct
meanwhile, so a user column named ``key`` or ``op`` cannot collide with them. Nothing runs per row
in Python and nothing is ``eval``'d.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import TableInfo
from spark_jobs.normalize.mount import NEW, OLD, image_columns

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

EVENT_TYPES = ("insert", "update", "delete")
EXPR_KEYS = (
    "ignore_insert_value_expr",
    "ignore_update_old_value_expr",
    "ignore_update_new_value_expr",
    "ignore_delete_value_expr",
)
_EVT = "__cdcflow_event"  # the packed event columns while the plain names are in scope
_DROP = "__cdcflow_drop"


def validate_filters(filters: Sequence[Mapping[str, Any]], table: TableInfo) -> None:
    """Reject malformed filter dicts (unknown keys or event types) before Spark sees them."""
    for i, f in enumerate(filters):
        unknown = set(f) - {"ignore_event", *EXPR_KEYS} - {"matcher", "ignore_sql"}
        if unknown:
            raise ChangefeedError(f"event filter #{i} of {table.qualified_name}: unknown keys {sorted(unknown)}")
        # TiCDC's DDL event types ("create table", "all ddl", ...) are multi-word and belong to the DDL
        # side; "all dml" means all three DML types. A single unknown word is a typo.
        bad = {e for e in f.get("ignore_event") or () if e not in EVENT_TYPES and " " not in e}
        if bad:
            raise ChangefeedError(
                f"event filter #{i} of {table.qualified_name}: unknown DML event types {sorted(bad)} "
                f"(expected a subset of {list(EVENT_TYPES)})"
            )


def drops_rows(filters: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``filters`` can drop a row event: one ignores a DML type or has a value expression (the others are the
    DDL side's, or match nothing here)."""
    return any(_ignored(filters, k) for k in EVENT_TYPES) or any(_exprs(filters, k) for k in EXPR_KEYS)


def _ignored(filters: Sequence[Mapping[str, Any]], event: str) -> bool:
    return any(event in (f.get("ignore_event") or ()) or "all dml" in (f.get("ignore_event") or ()) for f in filters)


def _exprs(filters: Sequence[Mapping[str, Any]], key: str) -> list[str]:
    return [str(f[key]) for f in filters if f.get(key) not in (None, "")]


def _any(conds: list[SparkColumn]) -> SparkColumn | None:
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = out | c
    return out


def _eval_on_image(staged: DataFrame, image: str, exprs: list[str], table: TableInfo, guard: SparkColumn) -> DataFrame:
    """Add ``_DROP |= guard AND (expr1 OR expr2 ...)`` with the plain names bound to ``image``."""
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, NullType

    names = [n for n, _ in image_columns(table)]
    scoped = staged.select(_EVT, _DROP, *[F.col(f"{_EVT}.{image}").getField(n).alias(n) for n in names])
    conds: list[SparkColumn] = []
    for e in exprs:
        # Resolve each expression on its own so that an error names the one that failed.
        try:
            col = F.expr(e)
            dtype = scoped.select(col.alias("_x")).schema["_x"].dataType
        except PySparkException as exc:
            raise ChangefeedError(
                f"event filter expression {e!r} of table {table.qualified_name} is not valid Spark SQL over "
                f"its columns {names}: {exc}"
            ) from exc
        if not isinstance(dtype, BooleanType | NullType):
            raise ChangefeedError(
                f"event filter expression {e!r} of table {table.qualified_name} is {dtype.simpleString()}, "
                "not a boolean"
            )
        conds.append(F.coalesce(col.cast("boolean"), F.lit(False)))  # NULL: not ignored
    hit = _any(conds)
    if hit is None:
        return staged
    return scoped.select(_EVT, (F.col(_DROP) | (guard & hit)).alias(_DROP))


def apply_event_filters(
    mounted: DataFrame,
    table: TableInfo,
    filters: Sequence[Mapping[str, Any]] = (),
    ignore_txn_start_ts: Sequence[int] = (),
) -> DataFrame:
    """The mounted events of ``table`` without the ones the filters ignore (same columns).

    Call it on :func:`spark_jobs.normalize.mount.mount`'s output, before the update split: an update is
    judged as the one event the upstream wrote, not as its split halves.
    """
    from pyspark.sql import functions as F

    validate_filters(filters, table)
    out = mounted
    if ignore_txn_start_ts:
        out = out.where(~F.col("start_ts").isin([int(t) for t in ignore_txn_start_ts]))
    if not filters:
        return out

    ignored_types = [k for k in EVENT_TYPES if _ignored(filters, k)]
    insert_exprs = _exprs(filters, "ignore_insert_value_expr")
    update_old_exprs = _exprs(filters, "ignore_update_old_value_expr")
    update_new_exprs = _exprs(filters, "ignore_update_new_value_expr")
    delete_exprs = _exprs(filters, "ignore_delete_value_expr")
    if not ignored_types and not (insert_exprs or update_old_exprs or update_new_exprs or delete_exprs):
        return out

    columns = out.columns

    def kind(k: str) -> SparkColumn:  # the same predicates, on the packed event
        op, old = F.col(f"{_EVT}.op"), F.col(f"{_EVT}.{OLD}")
        return {
            "insert": (op == "put") & old.isNull(),
            "update": (op == "put") & old.isNotNull(),
            "delete": op == "delete",
        }[k]

    by_type = _any([kind(k) for k in ignored_types])
    staged = out.select(F.struct(*columns).alias(_EVT), (by_type if by_type is not None else F.lit(False)).alias(_DROP))
    # New image: inserts and updates. Old image: updates and deletes.
    staged = _eval_on_image(staged, NEW, insert_exprs, table, kind("insert"))
    staged = _eval_on_image(staged, NEW, update_new_exprs, table, kind("update"))
    staged = _eval_on_image(staged, OLD, update_old_exprs, table, kind("update"))
    staged = _eval_on_image(staged, OLD, delete_exprs, table, kind("delete"))
    return staged.where(~F.col(_DROP)).select(*[F.col(f"{_EVT}.{c}").alias(c) for c in columns])
