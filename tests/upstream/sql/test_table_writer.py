"""Row keys as TiDB writes them for each kind of handle: the clustered integer PK, TiDB's common handle (a clustered
PK of any other shape: ``t{id}_r`` + the PK's memcomparable datums) and the hidden ``_tidb_rowid``; a moved primary
key is a delete of the old key and a put of the new one; duplicates answer 1062."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from cdc_core.codec import key as keycodec
from cdc_core.codec import memcomparable
from cdc_core.codec.datum_key import encode_key
from cdc_core.codec.row import decode_row
from cdc_core.errors import UpstreamError
from cdc_core.schema import tidb_json
from cdc_core.schema.ddl_history import jobs_from_sql


def _rows(ec: Any, db: str, table: str) -> tuple[Any, list[tuple[bytes, bytes]]]:
    cluster = ec.cluster
    info = ec.call(lambda: cluster.catalog.table(db, table))
    start, end = keycodec.table_span(info.id)
    return info, ec.call(lambda: cluster.store.scan(start, end, cluster.tso.next()))


def test_common_handle_row_keys_are_the_pk_datums(upstream_cluster: Any, upstream_client: Any, fresh_db: str) -> None:
    c = upstream_client
    # Clustered by default, as with TiDB's tidb_enable_clustered_index = ON.
    c.execute(f"CREATE TABLE {fresh_db}.c (k VARCHAR(10), n BIGINT, d DECIMAL(6,2), at DATETIME, v TEXT, "
              f"PRIMARY KEY (k, n, d, at))")
    c.execute(f"INSERT INTO {fresh_db}.c VALUES ('b', -1, 1.50, '2024-01-02 03:04:05', 'x'), "
              f"('a', 7, 0, '1999-12-31 23:59:59', 'y')")
    info, rows = _rows(upstream_cluster, fresh_db, "c")
    assert info.is_common_handle and not info.pk_is_handle and info.primary_key == ("k", "n", "d", "at")
    prefix = keycodec.table_prefix(info.id) + b"_r"
    # codec.EncodeKey of the PK datums: bytesFlag + group-padded bytes, intFlag + sign-flipped int, decimalFlag +
    # precision, frac and the binary decimal, uintFlag + packed datetime (pkg/util/codec/codec.go).
    a_key = (prefix + b"\x01" + memcomparable.encode_bytes(b"a") + b"\x03" + (7 + (1 << 63)).to_bytes(8, "big")
             + encode_key([(info.column("d").field_type(), Decimal("0.00"))])
             + encode_key([(info.column("at").field_type(), dt.datetime(1999, 12, 31, 23, 59, 59))]))
    assert [k for k, _ in rows] == sorted(k for k, _ in rows) and rows[0][0] == a_key  # 'a' sorts first
    assert decode_row(info, rows[0][1])[info.column("k").id] == "a"  # the value keeps every column, PK included
    assert keycodec.record_handle(a_key, common=True) == a_key[len(prefix):]

    c.execute(f"UPDATE {fresh_db}.c SET n = 8 WHERE k = 'a'")  # the PK moves: a new key, the old one gone
    _, moved = _rows(upstream_cluster, fresh_db, "c")
    assert a_key not in [k for k, _ in moved] and len(moved) == 2
    with pytest.raises(UpstreamError, match=r"Duplicate entry 'b--1-1.50-2024-01-02 03:04:05' for key 'c.PRIMARY'"):
        c.execute(f"INSERT INTO {fresh_db}.c VALUES ('b', -1, 1.5, '2024-01-02 03:04:05', 'z')")
    assert c.query(f"SELECT TIDB_PK_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{fresh_db}' "
                   "AND TABLE_NAME = 'c'") == [{"TIDB_PK_TYPE": "CLUSTERED"}]
    assert sorted(r["n"] for r in c.query(f"SELECT n FROM {fresh_db}.c")) == [-1, 8]


def test_pk_kinds_follow_tidb_and_the_job_json_says_which(upstream_cluster: Any, upstream_client: Any,
                                                           fresh_db: str) -> None:
    c = upstream_client
    c.execute(f"USE {fresh_db}; CREATE TABLE i (id INT PRIMARY KEY); CREATE TABLE s (id VARCHAR(5) PRIMARY KEY); "
              "CREATE TABLE n (id VARCHAR(5) PRIMARY KEY NONCLUSTERED); CREATE TABLE r (id INT)")
    kinds = {}
    for name in "isnr":
        info = upstream_cluster.call(lambda n=name: upstream_cluster.cluster.catalog.table(fresh_db, n))
        kinds[name] = (info.pk_is_handle, info.is_common_handle)
    assert kinds == {"i": (True, False), "s": (False, True), "n": (False, False), "r": (False, False)}
    rows = c.query("SELECT job_meta FROM mysql.tidb_ddl_history ORDER BY job_id DESC LIMIT 3")
    jobs = {j.table_name: j for j in jobs_from_sql(rows, 0)}
    meta = {name: j.table_info for name, j in jobs.items()}
    assert meta["s"] is not None and meta["s"].is_common_handle and meta["n"] is not None
    assert not meta["n"].is_common_handle
    raw = tidb_json.table_to_tidb(meta["s"])
    assert raw["is_common_handle"] is True and raw["common_handle_version"] == 1 and raw["pk_is_handle"] is False
    assert [ix["is_primary"] for ix in raw["index_info"]] == [True]  # a common handle's PK is an index (id 1)
    assert tidb_json.table_from_tidb(raw, db_name=fresh_db, db_id=meta["s"].db_id).is_common_handle
