"""A table's row values as TiDB stores them (rowcodec v2), encoded and decoded by its ``TableInfo``.

The value of a ``t{table}_r{handle}`` key is a rowcodec v2 row (``cdc_core.codec.rowcodec``; TiDB
``pkg/util/rowcodec``) whose column types come from the table's schema at the write's ts. Decoding
takes the schema at the commit ts: ids it no longer has are dropped columns and are skipped; ids it
has but the value lacks are left out, for ``TableInfo.decode_values`` to fill with the column's
origin default. Bulk decoding for the Spark job is ``cdc_core.codec.rowcodec_batch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cdc_core.codec import rowcodec

if TYPE_CHECKING:
    from cdc_core.schema.model import TableInfo


def encode_row(info: TableInfo, values: Mapping[int, Any]) -> bytes:
    """A v2 row of ``{column id: value}`` (``None`` is NULL; values as ``Column.convert`` returns them) typed by
    ``info``; only the given ids are stored.

    Raises ``rowcodec.RowCodecError`` for an id ``info`` does not have or a value its column cannot hold."""
    types = info.field_types()
    missing = sorted(set(values) - set(types))
    if missing:
        raise rowcodec.RowCodecError(f"table {info.qualified_name} has no column id {missing[0]}")
    column = info.column_with_id
    return rowcodec.encode_row_v2([(cid, types[cid], column(cid).to_stored(v)) for cid, v in values.items()])


def encode_values(info: TableInfo, values: Mapping[str, Any]) -> bytes:
    """The row TiDB writes for ``{column name: value}``: every column of ``info``, absent names as NULL."""
    return encode_row(info, {c.id: values.get(c.name) for c in info.columns})


def decode_row(info: TableInfo, data: bytes) -> dict[int, Any]:
    """``{column id: value}`` of a stored row (v2 or the older datum format) under ``info``, as the row codec
    decodes them (``TableInfo.decode_values`` makes them the columns' Python values)."""
    try:
        return rowcodec.decode_row(data, info.field_types())
    except rowcodec.RowCodecError as exc:
        raise rowcodec.RowCodecError(f"table {info.qualified_name} (id {info.id}): {exc}") from None
