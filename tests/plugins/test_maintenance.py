"""The maintenance DAG and its functions on small Delta tables made with deltalake: compaction reduces the file
count, vacuum deletes the tombstoned files, both keep time travel by cdcflow ts; bronze retention and trash
cleanup go through the guarded retention import; GC safe points against the session upstream."""

from __future__ import annotations

import shutil
import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from cdcflow_airflow import maintenance

from cdc_core.codec import tso

ROOT = Path(__file__).resolve().parents[2]


def _append(path: Path, rows: list[int], ts: int) -> None:
    from deltalake import CommitProperties, write_deltalake

    write_deltalake(str(path), pa.table({"id": rows}), mode="append",
                    commit_properties=CommitProperties(custom_metadata={"cdcflow.ts": str(ts)}))


def _version_as_of(path: Path, ts: int) -> int | None:
    """What spark_jobs.checks.data_quality.version_as_of computes (time travel by cdcflow ts)."""
    from deltalake import DeltaTable

    best = None
    for info in DeltaTable(str(path)).history():
        if int(info.get("cdcflow.ts") or 0) <= ts and (best is None or int(info["version"]) > best):
            best = int(info["version"])
    return best


def _data_files(path: Path) -> set[str]:
    return {p.name for p in path.glob("*.parquet")}


@pytest.fixture
def lake(cdcflow_home: Path, tmp_path: Path, pd_addr: str) -> dict[str, Any]:
    """Changefeed ``orders`` (paused) on a sink with silver tables shop.orders (5 small files) and shop.items, a
    non-Delta directory and an internal ``_cdcflow`` Delta table that maintenance must not touch."""
    from deltalake import write_deltalake

    from cdc_core.changefeed.config import ChangefeedConfig, save_config
    from cdc_core.changefeed.state import create_state, locked_state

    sink = tmp_path / "lake"
    for i in range(5):
        _append(sink / "shop" / "orders", [i], 100 + i)
    _append(sink / "shop" / "items", [1], 104)
    (sink / "shop" / "notes").mkdir()
    write_deltalake(str(sink / "_cdcflow" / "dq_results"), pa.table({"x": [1]}))
    save_config(ChangefeedConfig(changefeed_id="orders", sink_uri=f"file://{sink}", start_ts=1, upstream=pd_addr))
    checkpoint = tso.compose(tso.now_physical_ms() - 10 * 3_600_000)  # 10 h ago
    create_state("orders", checkpoint)
    with locked_state("orders") as st:
        st.state = "paused"
    return {"sink": sink, "sink_uri": f"file://{sink}", "checkpoint": checkpoint}


def test_lists_changefeeds_and_finds_only_silver_tables(lake: dict) -> None:
    cfs = maintenance.list_changefeeds()
    assert cfs == [{"changefeed_id": "orders", "sink_uri": lake["sink_uri"], "state": "paused",
                    "checkpoint_ts": lake["checkpoint"]}]
    tables = maintenance.find_silver_tables([*cfs, {**cfs[0], "changefeed_id": "other"}])
    assert [(t["name"], t["changefeed_ids"]) for t in tables] == [("shop.items", ["orders", "other"]),
                                                                  ("shop.orders", ["orders", "other"])]
    assert tables[1]["path"] == str(lake["sink"] / "shop" / "orders")


def test_compaction_and_vacuum_keep_the_data_and_time_travel(lake: dict) -> None:
    from deltalake import DeltaTable

    path = lake["sink"] / "shop" / "orders"
    before_files = _data_files(path)
    assert len(DeltaTable(str(path)).file_uris()) == 5 and len(before_files) == 5
    as_of = {ts: _version_as_of(path, ts) for ts in range(100, 106)}
    table = {"path": str(path), "name": "shop.orders", "changefeed_ids": ["orders"]}

    out = maintenance.maintain_table(table, 0, enforce_retention_duration=False)
    assert out["leases"] == ["orders"]
    assert out["compact"]["files_before"] == 5 and out["compact"]["files_after"] == 1
    assert out["compact"]["files_removed"] == 5 and out["compact"]["files_added"] == 1
    assert out["vacuum"]["files_deleted"] == 5
    after_files = _data_files(path)
    assert len(after_files) == 1 and not after_files & before_files  # the tombstoned files are gone from disk
    dt = DeltaTable(str(path))
    assert sorted(dt.to_pyarrow_table()["id"].to_pylist()) == [0, 1, 2, 3, 4]
    # maintenance commits carry the last window's ts: time travel by cdcflow ts still finds each window's version
    ops = [(h["operation"], h.get("cdcflow.ts")) for h in dt.history(3)]
    assert ops == [("VACUUM END", "104"), ("VACUUM START", "104"), ("OPTIMIZE", "104")]
    assert {ts: _version_as_of(path, ts) for ts in range(100, 104)} == {ts: as_of[ts] for ts in range(100, 104)}
    assert _version_as_of(path, 104) == dt.version()  # same data as the last window's version
    from cdc_core.changefeed import lease

    assert lease.holder("orders") is None  # released


def test_a_table_with_deletion_vectors_is_compacted_and_its_replaced_vectors_vacuumed(lake: dict) -> None:
    """Merge-on-read windows (``[sink] deletion-vectors``) leave vectors that later windows replaced: compaction
    applies the live ones, vacuum deletes every vector file no live file names, and the rows stay."""
    import os

    from deltalake import DeltaTable

    from cdc_core.schema.model import Column, Index, TableInfo
    from spark_jobs.load.delta_writer import DeltaRsWriter
    from spark_jobs.load.silver_read import read_table

    info = TableInfo(id=9, db_name="shop", name="lines",
                     columns=(Column(1, "id", "bigint", nullable=False), Column(2, "v", "int")),
                     indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),))
    path = lake["sink"] / "shop" / "lines"
    writer = DeltaRsWriter(deletion_vectors=True)
    schema = pa.schema([*info.arrow_schema(), pa.field("_cdc_op", pa.string())])
    writer.merge(str(path), info, pa.table({"id": list(range(100)), "v": [0] * 100, "_cdc_op": ["upsert"] * 100},
                                           schema=schema), app_id="cdcflow/orders", version=100)
    for w in range(1, 4):
        writer.merge(str(path), info, pa.table({"id": [w, 50 + w], "v": [w, w], "_cdc_op": ["upsert", "delete"]},
                                               schema=schema), app_id="cdcflow/orders", version=100 + w)
    vectors = {p.name for p in path.glob("deletion_vector_*.bin")}
    assert len(vectors) == 3  # each window after the first marked the first window's file anew
    want = sorted(read_table(DeltaTable(str(path)), ["id", "v"]).to_pylist(), key=lambda r: r["id"])
    out = maintenance.maintain_table({"path": str(path), "name": "shop.lines", "changefeed_ids": ["orders"]}, 0,
                                     enforce_retention_duration=False)
    assert out["compact"]["files_after"] == 1
    assert not list(path.glob("deletion_vector_*.bin")), os.listdir(path)
    assert set(out["vacuum"]["deleted"]) >= vectors
    dt = DeltaTable(str(path))
    assert sorted(read_table(dt, ["id", "v"]).to_pylist(), key=lambda r: r["id"]) == want
    assert len(want) == 97 and dt.transaction_version("cdcflow/orders") == 103


def test_the_dq_result_log_is_compacted_checkpointed_and_keeps_its_rows(lake: dict) -> None:
    from deltalake import DeltaTable

    from cdc_core.changefeed import dq_results

    path = dq_results.results_path(lake["sink_uri"])
    shutil.rmtree(path)  # the fixture's stand-in, another schema
    for ts in range(1, 13):  # a dozen barriers, a commit each
        dq_results.append(lake["sink_uri"], "orders", ts, "barrier", "count", {
            "shop.orders": {"results": [{"expectation": "row_count", "success": True, "observed": ts}]}})
    assert len(DeltaTable(path).file_uris()) == 12
    out = maintenance.maintain_dq_results(maintenance.list_changefeeds(), 0, enforce_retention_duration=False)
    rep = out["sinks"][lake["sink_uri"]]
    assert rep["leases"] == ["orders"] and rep["compact"]["files_after"] == 1
    assert rep["vacuum"]["files_deleted"] == 12
    dt = DeltaTable(path)
    assert sorted(dt.to_pyarrow_table().column("ts").to_pylist()) == list(range(1, 13))
    assert (Path(path) / "_delta_log" / f"{rep['checkpoint_version']:020d}.checkpoint.parquet").is_file()
    # A sink without results yet is said so.
    shutil.rmtree(path)
    assert maintenance.maintain_dq_results(maintenance.list_changefeeds(), 0)["sinks"][lake["sink_uri"]] == {
        "skipped": True, "reason": "no data-quality results yet"}


def test_vacuum_enforces_the_tables_retention_unless_told_not_to(lake: dict) -> None:
    path = str(lake["sink"] / "shop" / "orders")
    maintenance.compact_table(path)
    with pytest.raises(Exception, match=r"(?i)retention"):
        maintenance.vacuum_table(path, 0)
    assert maintenance.vacuum_table(path, 168)["files_deleted"] == 0  # tombstones younger than a week stay


def test_a_table_waits_for_its_changefeeds_window(lake: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_core.changefeed import lease

    lease.acquire("orders", "airflow:run-1", target_ts=lake["checkpoint"] + 1)
    table = {"path": str(lake["sink"] / "shop" / "items"), "name": "shop.items", "changefeed_ids": ["orders"]}
    monkeypatch.setattr(maintenance, "LEASE_WAIT_S", 0.0)
    with pytest.raises(lease.LeaseBusy):
        with maintenance.window_leases(["orders"], wait_s=0.0):
            pass
    lease.release("orders", "airflow:run-1")
    assert maintenance.maintain_table(table, 168)["leases"] == ["orders"]


def _fake_retention(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    calls: list[tuple] = []
    fake = types.ModuleType(maintenance.RETENTION_MODULE)
    fake.prune_changelog = lambda sink, cid, keep: calls.append(("prune", sink, cid, keep)) or {"windows": [1]}
    fake.remove_trash = lambda sink, days: calls.append(("trash", sink, days)) or []
    fake.fold_changelog = lambda cid, keep: calls.append(("fold", cid, keep)) or {"folded": False}
    monkeypatch.setitem(__import__("sys").modules, maintenance.RETENTION_MODULE, fake)
    return calls


def test_bronze_retention_is_called_with_checkpoint_minus_retention(lake: dict,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_retention(monkeypatch)
    cfs = maintenance.list_changefeeds()
    out = maintenance.prune_bronze([*cfs, {"changefeed_id": "new", "sink_uri": "x", "checkpoint_ts": 0}], 2)
    keep = tso.compose(tso.physical_ms(lake["checkpoint"]) - 2 * 3_600_000)
    # a running changefeed's windows are folded into a snapshot first (under its lease), then pruned
    assert calls == [("fold", "orders", keep), ("prune", lake["sink_uri"], "orders", keep)]
    assert out["changefeeds"]["orders"] == {"keep_after_ts": keep, "fold": {"folded": False},
                                            "result": {"windows": [1]}}
    assert out["changefeeds"]["new"]["skipped"]
    # a retention longer than the checkpoint's age (from the epoch) prunes nothing
    assert maintenance.keep_after_ts(tso.compose(1000), 1) is None
    assert maintenance.remove_rebuild_trash(cfs, 7)["sinks"] == {lake["sink_uri"]: []}
    assert calls[-1] == ("trash", lake["sink_uri"], 7)


def test_the_retention_guard(lake: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    cfs = maintenance.list_changefeeds()
    real = maintenance.prune_bronze(cfs, 1)  # the real module: no complete snapshot yet, nothing pruned
    assert real["skipped"] is False and real["changefeeds"]["orders"]["result"]["windows"] == []
    missing = ModuleNotFoundError("No module named 'cdc_core.changefeed.retention'",
                                  name=maintenance.RETENTION_MODULE)
    original = importlib.import_module

    def fake_import(name: str, *a: Any) -> Any:
        if name == maintenance.RETENTION_MODULE:
            raise missing
        return original(name, *a)

    monkeypatch.setattr(maintenance.importlib, "import_module", fake_import)
    assert maintenance.prune_bronze(cfs, 1)["skipped"] is True
    assert maintenance.remove_rebuild_trash(cfs, 1)["skipped"] is True


def test_gc_safe_points_refresh_paused_and_remove_finished(lake: dict, upstream_cluster: Any) -> None:
    from cdc_core.changefeed.state import locked_state

    def live() -> dict[str, int]:
        return upstream_cluster.call(lambda: upstream_cluster.cluster.gc_safe_points.live())

    def update(service: str, ttl: float, sp: int) -> int:
        return upstream_cluster.call(lambda: upstream_cluster.cluster.gc_safe_points.update(service, ttl, sp))

    # Earlier tests' changefeeds may hold safe points above this lake's checkpoint on the shared
    # session cluster, and a new service may not register below the minimum: set them aside for
    # this test and put them back (lowest first, so each is at or above the minimum) afterwards.
    others = {k: v for k, v in live().items() if k != "cdcflow-orders"}
    for k in others:
        update(k, 0, 0)
    try:
        cfs = maintenance.list_changefeeds()
        out = maintenance.refresh_gc_safe_points(cfs, ttl_hours=1)
        assert out["changefeeds"]["orders"]["action"] == "refresh" and out["changefeeds"]["orders"]["in_force"]
        assert live()["cdcflow-orders"] == lake["checkpoint"]
        with locked_state("orders") as st:
            st.state = "finished"
        out = maintenance.refresh_gc_safe_points(maintenance.list_changefeeds(), ttl_hours=1)
        assert out["changefeeds"]["orders"] == {"action": "remove", "state": "finished", "ok": True}
        assert "cdcflow-orders" not in live()
    finally:
        for k, v in sorted(others.items(), key=lambda kv: kv[1]):
            update(k, 3600, v)


def test_retention_hours_from_param_variable_or_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_VAR_CDCFLOW_RETENTION_HOURS", raising=False)
    assert maintenance.retention_hours(None) == 168
    assert maintenance.retention_hours(24) == 24
    monkeypatch.setenv("AIRFLOW_VAR_CDCFLOW_RETENTION_HOURS", "72")
    assert maintenance.retention_hours(None) == 72 and maintenance.retention_hours(0) == 0
    with pytest.raises(ValueError):
        maintenance.retention_hours(-1)


def test_the_dag(cdcflow_home: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags" / "cdcflow_maintenance.py"), safe_mode=False)
    assert bag.import_errors == {}
    dag = bag.dags["cdcflow__maintenance"]
    assert dag.catchup is False and dag.owner == "cdcflow" and sorted(dag.tags) == ["cdcflow", "maintenance"]
    assert dag.max_active_runs == 1 and "retention" in dag.doc_md
    assert dag.timetable.expression == "0 0 * * *"  # @daily
    up = {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks}
    assert up == {"list_changefeeds": [], "find_silver_tables": ["list_changefeeds"],
                  "maintain_table": ["find_silver_tables"], "maintain_dq_results": ["list_changefeeds"],
                  "prune_bronze": ["list_changefeeds"],
                  "remove_rebuild_trash": ["list_changefeeds"], "reconcile": ["list_changefeeds"],
                  "refresh_gc_safe_points": ["list_changefeeds"]}
    assert dag.params["retention_hours"] is None and dag.params["gc_ttl_hours"] == 48
    from airflow.serialization.serialized_objects import DagSerialization

    DagSerialization.to_dict(dag)  # the scheduler can take it
