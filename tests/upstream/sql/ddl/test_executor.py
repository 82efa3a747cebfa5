"""DDL jobs as TiDB keeps them (tidb_ddl_job, then tidb_ddl_history; in SQL and on EventFeed), schema versions,
table ids and regions."""

from __future__ import annotations

import json
from typing import Any

from wire.eventfeed import FeedClient, T, register_all, scan_regions, table_id, table_regions, wait_resolved

from cdc_core.codec import key as keycodec
from cdc_core.proto import cdcpb_pb2
from cdc_core.schema import ddl_history
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Column


def history(client: Any, after_job: int = 0) -> list[DDLJob]:
    rows = client.query(f"SELECT job_meta FROM mysql.tidb_ddl_history WHERE job_id > {after_job} ORDER BY job_id")
    return ddl_history.jobs_from_sql(rows, 0)


def last_job_id(client: Any) -> int:
    return int(client.query("SELECT MAX(job_id) AS m FROM mysql.tidb_ddl_history")[0]["m"] or 0)


def test_ddl_job_tables_have_their_own_regions(upstream_cluster: Any) -> None:
    for tid in (ddl_history.JOB_TABLE_ID, ddl_history.HISTORY_TABLE_ID):
        start, end = keycodec.table_span(tid)
        [r] = scan_regions(upstream_cluster.pd_addr, start, end)
        assert (r.start_key, r.end_key) == (start, end)


def test_each_ddl_writes_a_history_row_at_its_commit_ts(upstream_cluster: Any, upstream_client: Any) -> None:
    before = last_job_id(upstream_client)
    res = upstream_client.execute(
        "CREATE DATABASE ddl_h; USE ddl_h; CREATE TABLE t (a INT PRIMARY KEY, b VARCHAR(8) DEFAULT 'z');"
        "CREATE TABLE n (a INT); TRUNCATE TABLE t; RENAME TABLE n TO n2; ALTER TABLE n2 RENAME TO n3;"
        "DROP TABLE t; DROP DATABASE ddl_h")
    jobs = history(upstream_client, before)
    assert [j.job_type for j in jobs] == ["create schema", "create table", "create table", "truncate table",
                                          "rename table", "rename table", "drop table", "drop schema"]
    ddl_results = [r for r in res if not r.statement.startswith("USE")]
    assert [j.finished_ts for j in jobs] == [r.commit_ts for r in ddl_results]
    versions = [j.schema_version for j in jobs]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    create_t, create_n, trunc, ren1, ren2 = jobs[1:6]
    assert create_t.table_info is not None and create_t.table_info.pk_is_handle
    assert create_t.table_info.column("b").default == "z" and create_t.table_info.schema_version == versions[1]
    assert create_n.table_info is not None and not create_n.table_info.pk_is_handle
    assert trunc.old_table_id == create_t.table_id and trunc.table_id != create_t.table_id
    assert trunc.table_info is not None and trunc.table_info.id == trunc.table_id
    assert (ren1.old_table_name, ren1.table_name, ren1.table_id) == ("n", "n2", create_n.table_id)
    assert ren2.table_info is not None and ren2.table_info.name == "n3"
    assert jobs[0].query == "CREATE DATABASE ddl_h" and jobs[6].table_info is None
    # a truncated table got its own regions
    assert len(table_regions(upstream_cluster.pd_addr, trunc.table_id)) == 2  # type: ignore[arg-type]


def test_rename_tables_is_one_job_of_several_tables(upstream_cluster: Any, upstream_client: Any,
                                                   fresh_db: str) -> None:
    """``RENAME TABLE a TO tmp, b TO a, tmp TO b`` swaps two tables in one ActionRenameTables job; read back, it is
    a part per pair (as TiCDC splits it), all at the job's commit ts, each from the name the last part left."""
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE a (x INT PRIMARY KEY); CREATE TABLE b (y INT PRIMARY KEY);"
                            "INSERT INTO a VALUES (1); INSERT INTO b VALUES (2)")
    a_id, b_id = table_id(upstream_cluster, fresh_db, "a"), table_id(upstream_cluster, fresh_db, "b")
    before = last_job_id(upstream_client)
    [res] = upstream_client.execute(f"RENAME TABLE {fresh_db}.a TO {fresh_db}.tmp, {fresh_db}.b TO {fresh_db}.a, "
                                    f"{fresh_db}.tmp TO {fresh_db}.b")
    [row] = upstream_client.query(f"SELECT job_meta FROM mysql.tidb_ddl_history WHERE job_id > {before}")
    meta = json.loads(Column(1, "job_meta", "longblob").convert(row["job_meta"]))  # a LONGBLOB's JSON form
    assert meta["type"] == 47 and len(meta["binlog"]["MultipleTableInfos"]) == 3  # model.ActionRenameTables
    assert meta["raw_args"][3] == [a_id, b_id, a_id]  # the table ids, in the statement's order
    parts = ddl_history.jobs_from_sql([row], 0)
    assert [(p.sub_index, p.table_id, p.old_table_name, p.table_name) for p in parts] == [
        (0, a_id, "a", "tmp"), (1, b_id, "b", "a"), (2, a_id, "tmp", "b")]
    assert {p.finished_ts for p in parts} == {res.commit_ts} and len({p.job_id for p in parts}) == 1
    assert upstream_client.query(f"SELECT x FROM {fresh_db}.b") == [{"x": 1}]
    assert upstream_client.query(f"SELECT y FROM {fresh_db}.a") == [{"y": 2}]
    assert table_id(upstream_cluster, fresh_db, "b") == a_id and table_id(upstream_cluster, fresh_db, "a") == b_id


def test_truncate_gives_an_empty_table_with_a_new_id(upstream_cluster: Any, upstream_client: Any,
                                                     fresh_db: str) -> None:
    upstream_client.execute(f"USE {fresh_db}; CREATE TABLE t (a INT PRIMARY KEY); INSERT INTO t VALUES (1)")
    old = table_id(upstream_cluster, fresh_db, "t")
    upstream_client.execute(f"TRUNCATE TABLE {fresh_db}.t")
    assert table_id(upstream_cluster, fresh_db, "t") != old
    assert upstream_client.query(f"SELECT COUNT(*) AS n FROM {fresh_db}.t") == [{"n": 0}]


def test_ddl_rows_reach_eventfeed(upstream_cluster: Any, upstream_client: Any, fresh_db: str,
                                  feed: FeedClient) -> None:
    start, end = keycodec.table_span(ddl_history.JOB_TABLE_ID)
    regions = scan_regions(upstream_cluster.pd_addr, start, end)
    ids = register_all(feed, regions, upstream_client.get_ts(), 1)
    res = upstream_client.execute(f"CREATE TABLE {fresh_db}.t (a INT PRIMARY KEY, b DECIMAL(5,2))")
    ts = res[0].commit_ts
    wait_resolved(feed, ids, regions, ts)
    commits = [r for r in feed.rows(ids[0]) if r.type == T.COMMIT]
    prewrites = {r.start_ts: r for r in feed.rows(ids[0]) if r.type == T.PREWRITE}
    [c] = [r for r in commits if r.commit_ts == ts]  # the job row put in state done: the DDL's commit ts
    [job] = ddl_history.jobs_from_value(ddl_history.JOB_TABLE_ID, prewrites[c.start_ts].value, c.commit_ts)
    assert job.finished_ts == ts and job.job_type == "create table"
    assert keycodec.decode_row_key(c.key) == (ddl_history.JOB_TABLE_ID, job.job_id)
    # then the job moves to the history table: its job row deleted after the DDL's commit
    moved = [r for r in commits if r.key == c.key and r.commit_ts > ts]
    assert moved and prewrites[moved[0].start_ts].op_type == cdcpb_pb2.Event.Row.DELETE
    info = upstream_cluster.call(lambda: upstream_cluster.cluster.catalog.table(fresh_db, "t"))
    assert job.table_info == info


def test_if_not_exists_and_if_exists_write_no_job(upstream_client: Any, fresh_db: str) -> None:
    upstream_client.execute(f"CREATE TABLE {fresh_db}.t (a INT PRIMARY KEY)")
    before = last_job_id(upstream_client)
    res = upstream_client.execute(f"CREATE TABLE IF NOT EXISTS {fresh_db}.t (a INT PRIMARY KEY);"
                                  f"DROP TABLE IF EXISTS {fresh_db}.nope; CREATE DATABASE IF NOT EXISTS {fresh_db}")
    assert [r.commit_ts for r in res] == [0, 0, 0]
    assert last_job_id(upstream_client) == before


def test_a_binary_default_that_is_not_utf8_is_refused(upstream_client: Any, fresh_db: str) -> None:
    """TiDB keeps a BINARY default as a JSON string; Go writes U+FFFD for bytes that are not UTF-8, so the schema
    TiDB loads back would hold another default. The stand-in refuses it instead of diverging from its job JSON."""
    import pytest

    from cdc_core.errors import UpstreamError

    c = upstream_client
    c.execute(f"CREATE TABLE {fresh_db}.t (a INT PRIMARY KEY, b VARBINARY(6) DEFAULT x'616263')")
    with pytest.raises(UpstreamError, match=r"invalid DEFAULT for column 'c': 3fa6b4 is not UTF-8"):
        c.execute(f"ALTER TABLE {fresh_db}.t ADD COLUMN c VARBINARY(6) DEFAULT x'3fa6b4'")
    c.execute(f"INSERT INTO {fresh_db}.t (a) VALUES (1)")
    assert c.query(f"SELECT b FROM {fresh_db}.t WHERE b = x'616263'") != []
