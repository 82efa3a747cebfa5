"""TiDB's schema read from its meta keys at a ts, against the session's upstream: the databases and tables there
(and not those made or dropped after), names read before TableInfos so that a table nobody replicates is never
decoded and one that cannot be decoded fails only when wanted, naming its table, column and type; tables read a page
at a time as they are consumed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from cdc_core.client.kv_snapshot import KvSnapshot
from cdc_core.codec import meta_key
from cdc_core.puller.pd_client import PDClient
from cdc_core.schema import tidb_json
from cdc_core.schema.meta_snapshot import DatabaseMeta, MetaSnapshot
from cdc_core.schema.model import Column, SchemaError, TableInfo
from cdc_core.upstream.sql.txn import Transaction

FUTURE_TP = 199  # a column type code no TiDB release has used: "a type added next year"


def read(pd_addr: str, ts: int, use: Callable[[MetaSnapshot, KvSnapshot], Any], **kw: Any) -> Any:
    async def main() -> Any:
        pd = PDClient(pd_addr)
        try:
            async with KvSnapshot(pd, ts, **kw) as snap:
                return await use(MetaSnapshot(snap), snap)
        finally:
            await pd.close()

    return asyncio.run(main())


async def _collect(it: AsyncIterator[Any]) -> list[Any]:
    return [x async for x in it]


def databases(pd_addr: str, ts: int) -> list[DatabaseMeta]:
    return read(pd_addr, ts, lambda meta, _: _collect(meta.databases()))  # type: ignore[no-any-return]


def tables(pd_addr: str, ts: int, db: DatabaseMeta, want: Callable[[str, str], bool] = lambda d, t: True
           ) -> tuple[list[TableInfo], int]:
    async def use(meta: MetaSnapshot, _: KvSnapshot) -> tuple[list[TableInfo], int]:
        return await _collect(meta.tables(db, want)), meta.skipped

    return read(pd_addr, ts, use)  # type: ignore[no-any-return]


def the_db(pd_addr: str, ts: int, name: str) -> DatabaseMeta:
    (db,) = [d for d in databases(pd_addr, ts) if d.name == name]
    return db


def test_the_schema_at_a_ts(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    c, pd, db = upstream_client, upstream_cluster.pd_addr, fresh_db
    c.execute(f"USE {db}; CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(8) NOT NULL DEFAULT 'x', UNIQUE KEY (v));"
              "CREATE TABLE b (id BIGINT, n DECIMAL(10, 2)) ")
    t1 = c.get_ts()
    c.execute(f"USE {db}; DROP TABLE a; ALTER TABLE b ADD COLUMN z INT; CREATE TABLE c (id INT PRIMARY KEY)")
    t2 = c.get_ts()
    meta_db = the_db(pd, t1, db)
    assert meta_db.id == upstream_cluster.call(lambda: upstream_cluster.cluster.catalog.database(db)).id
    at1, _ = tables(pd, t1, meta_db)
    assert sorted(t.name for t in at1) == ["a", "b"]
    a = next(t for t in at1 if t.name == "a")
    assert (a.db_name, a.db_id, a.primary_key, a.column("v").default, a.column("v").nullable) == (
        db, meta_db.id, ("id",), "x", False)
    at2, _ = tables(pd, t2, meta_db)
    assert sorted(t.name for t in at2) == ["b", "c"]
    assert [col.name for col in next(t for t in at2 if t.name == "b").columns] == ["id", "n", "z"]
    assert db not in [d.name for d in databases(pd, t1 - 10**9)]  # a ts before the database was made


def _undecodable(db_id: int, table_id: int, name: str) -> bytes:
    info = TableInfo(id=table_id, db_name="", name=name, columns=(
        Column(1, "id", "bigint", nullable=False), Column(2, "embedding", "bigint")), max_column_id=2)
    d = tidb_json.table_to_tidb(info)
    d["cols"][1]["type"]["Tp"] = FUTURE_TP
    return json.dumps(d).encode()


def test_names_come_before_table_infos(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    ec, c, db = upstream_cluster, upstream_client, fresh_db
    c.execute(f"USE {db}; CREATE TABLE kept (id INT PRIMARY KEY)")
    db_id = ec.call(lambda: ec.cluster.catalog.database(db)).id
    odd_id = 10**12 + db_id  # an id no table of the embedded catalog has

    fields = {meta_key.hash_field_key(meta_key.db_field(db_id), meta_key.table_field(odd_id)):
              _undecodable(db_id, odd_id, "odd"),
              # Another field of the database's hash, as TiDB keeps auto-id counters there: not a table.
              meta_key.hash_field_key(meta_key.db_field(db_id), f"TID:{odd_id}".encode()): b"5"}

    def put(delete: bool) -> int:
        txn = Transaction(ec.cluster.store, ec.cluster.tso)
        for k, v in fields.items():
            txn.delete(k) if delete else txn.put(k, v)
        return txn.commit_now()

    ts = ec.call(lambda: put(False))
    try:
        meta_db = the_db(ec.pd_addr, ts, db)
        got, skipped = tables(ec.pd_addr, ts, meta_db, lambda d, t: t != "odd")
        assert [t.name for t in got] == ["kept"] and skipped == 1
        with pytest.raises(SchemaError,
                           match=rf"table {db}\.odd \(id {odd_id}\).*column 'embedding'.*Tp {FUTURE_TP}"):
            tables(ec.pd_addr, ts, meta_db)
    finally:  # later tests of the session read every table's schema: the odd one goes again
        ec.call(lambda: put(True))


def test_tables_are_read_a_page_at_a_time_as_they_are_consumed(upstream_cluster: Any, fresh_db: str) -> None:
    ec = upstream_cluster
    cols = (Column(1, "id", "bigint", nullable=False),)
    made = ec.call(lambda: ec.cluster.catalog.bulk_create_tables(fresh_db, [f"t{i:04d}" for i in range(1000)], cols))
    # A hash lists its fields in key order, and TiDB writes ids in decimal: Table:1009 before Table:110.
    in_field_order = [t.name for t in sorted(made, key=lambda t: meta_key.table_field(t.id))]
    ts = ec.call(lambda: ec.cluster.tso.next())
    meta_db = the_db(ec.pd_addr, ts, fresh_db)
    pages: list[int] = []

    class Counting(KvSnapshot):
        async def _send(self, key: bytes, call: Any) -> Any:
            resp, region = await super()._send(key, call)
            if hasattr(resp, "pairs"):
                pages.append(len(resp.pairs))
            return resp, region

    async def main() -> tuple[int, int]:
        pd = PDClient(ec.pd_addr)
        try:
            async with Counting(pd, ts, page=100) as snap:
                it = MetaSnapshot(snap).tables(meta_db, lambda d, t: True)
                first = [await anext(it) for _ in range(5)]
                assert [t.name for t in first] == in_field_order[:5]
                pages_for_first = len(pages)
                rest = [t async for t in it]
                return pages_for_first, len(first) + len(rest)
        finally:
            await pd.close()

    pages_for_first, n = asyncio.run(main())
    assert pages_for_first == 1  # five tables cost one page, not the database
    assert n == 1000 and max(pages) == 100 and len(pages) == 11  # ten full pages and the empty last one
