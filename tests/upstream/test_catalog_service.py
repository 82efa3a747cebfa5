"""Catalog service: ListTables (schema, pattern, hash) and WatchTableList (initial + updates)."""

from __future__ import annotations

import queue
import threading
from typing import Any

import grpc
from wire.eventfeed import wait_until

from cdc_core.proto import catalogpb_pb2, catalogpb_pb2_grpc

Ev = catalogpb_pb2.WatchTableListEvent


def test_list_tables_by_schema_and_pattern(pd_addr: str, upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE orders (a INT); CREATE TABLE order_items (a INT);"
                            "CREATE TABLE users (a INT)")
    with grpc.insecure_channel(pd_addr) as ch:
        stub = catalogpb_pb2_grpc.CatalogStub(ch)
        all_ = stub.ListTables(catalogpb_pb2.ListTablesRequest(schema=fresh_db.upper()))
        assert sorted(t.name for t in all_.tables) == ["order_items", "orders", "users"]
        some = stub.ListTables(catalogpb_pb2.ListTablesRequest(schema=fresh_db, pattern="ORDER*"))
        assert sorted(t.name for t in some.tables) == ["order_items", "orders"]
        assert {t.schema for t in some.tables} == {fresh_db} and some.tables_hash != all_.tables_hash
        upstream_client.execute(f"DROP TABLE {fresh_db}.users")
        again = stub.ListTables(catalogpb_pb2.ListTablesRequest(schema=fresh_db))
        assert again.tables_hash != all_.tables_hash
        sys_tables = stub.ListTables(catalogpb_pb2.ListTablesRequest(schema="mysql"))
        assert sorted(t.name for t in sys_tables.tables) == ["tidb_ddl_history", "tidb_ddl_job"]
    assert [t.name for t in upstream_client.list_tables(fresh_db, "o?ders")] == ["orders"]


def test_watch_table_list(pd_addr: str, upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"CREATE TABLE {fresh_db}.a (x INT)")
    events: queue.Queue[Any] = queue.Queue()
    with grpc.insecure_channel(pd_addr) as ch:
        call = catalogpb_pb2_grpc.CatalogStub(ch).WatchTableList(
            catalogpb_pb2.WatchTableListRequest(schema=fresh_db, pattern="*"))

        def pump() -> None:
            try:
                for ev in call:
                    events.put(ev)
            except grpc.RpcError:
                pass

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        initial = events.get(timeout=10)
        assert initial.kind == Ev.INITIAL and [e.name for e in initial.added] == ["a"]
        upstream_client.execute(f"CREATE TABLE {fresh_db}.b (x INT)")
        # another schema's tables are not this watcher's business
        upstream_client.execute("CREATE DATABASE IF NOT EXISTS watch_other; CREATE TABLE watch_other.z (x INT)")
        upstream_client.execute(f"RENAME TABLE {fresh_db}.a TO {fresh_db}.a2; DROP TABLE {fresh_db}.b")
        got = [events.get(timeout=10) for _ in range(3)]
        assert all(e.kind == Ev.UPDATE for e in got)
        assert [([x.name for x in e.added], [x.name for x in e.removed]) for e in got] == [
            (["b"], []), (["a2"], ["a"]), ([], ["b"])]
        assert got[-1].tables_hash == upstream_client_hash(pd_addr, fresh_db)
        call.cancel()
        t.join(10)
    wait_until(lambda: events.empty())
    upstream_client.execute("DROP DATABASE watch_other")


def upstream_client_hash(pd_addr: str, db: str) -> str:
    with grpc.insecure_channel(pd_addr) as ch:
        resp = catalogpb_pb2_grpc.CatalogStub(ch).ListTables(catalogpb_pb2.ListTablesRequest(schema=db))
        return str(resp.tables_hash)
