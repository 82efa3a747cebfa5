"""The engine's upkeep of a changefeed's lake (``upkeep``): what it finds to maintain, the maintain job run under
the window leases of a table's changefeeds, the bronze retention at ``checkpoint - retention``, and the GC safe
points against the session upstream. (The job's own work on the tables: tests/spark_jobs/test_maintain.py.)"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from cdc_core.changefeed import dq_results, lease, retention, spark_engine, upkeep
from cdc_core.changefeed.job_args.maintain import MaintainArgs
from cdc_core.codec import tso
from testkit.small_lake import make_lake


@pytest.fixture
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pd_addr: str) -> dict[str, Any]:
    """Changefeed ``orders`` (paused, checkpoint 10 h ago) on a sink of small silver tables (``make_lake``)."""
    from cdc_core.changefeed.config import ChangefeedConfig, save_config
    from cdc_core.changefeed.state import create_state, locked_state

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path / "cdcflow"))
    sink = make_lake(tmp_path / "lake")
    save_config(ChangefeedConfig(changefeed_id="orders", sink_uri=f"file://{sink}", start_ts=1, upstream=pd_addr))
    checkpoint = tso.compose(tso.now_physical_ms() - 10 * 3_600_000)
    create_state("orders", checkpoint)
    with locked_state("orders") as st:
        st.state = "paused"
    return {"sink": sink, "sink_uri": f"file://{sink}", "checkpoint": checkpoint}


def test_lists_changefeeds_and_finds_only_silver_tables(lake: dict) -> None:
    cfs = upkeep.list_changefeeds()
    assert cfs == [{"changefeed_id": "orders", "sink_uri": lake["sink_uri"], "state": "paused",
                    "checkpoint_ts": lake["checkpoint"]}]
    tables = upkeep.find_silver_tables([*cfs, {**cfs[0], "changefeed_id": "other"}])
    assert [(t["name"], t["changefeed_ids"]) for t in tables] == [("shop.items", ["orders", "other"]),
                                                                  ("shop.orders", ["orders", "other"])]
    assert tables[1]["path"] == str(lake["sink"] / "shop" / "orders")


def test_a_table_is_maintained_by_the_job_under_its_changefeeds_leases(lake: dict,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(lake["sink"] / "shop" / "orders")
    jobs: list[tuple[MaintainArgs, str | None]] = []
    real = spark_engine.run_job

    def run_job(args: Any) -> dict[str, Any]:  # the job runs while the window lease is held
        held = lease.holder("orders")
        jobs.append((args, held.owner if held else None))
        return real(args)

    monkeypatch.setattr(spark_engine, "run_job", run_job)
    out = upkeep.maintain_table({"path": path, "name": "shop.orders", "changefeed_ids": ["orders"]}, 0,
                                enforce_retention_duration=False)
    assert (out["table"], out["path"], out["leases"]) == ("shop.orders", path, ["orders"])
    assert out["compact"]["files_after"] == 1 and out["vacuum"]["files_deleted"] == 5
    [(args, owner)] = jobs
    assert args == MaintainArgs(path=path, retention_hours=0, enforce_retention_duration=False)
    assert owner is not None and owner.startswith("maintenance:")
    assert lease.holder("orders") is None  # released


def test_the_dq_result_log_is_maintained_per_sink_with_a_checkpoint(lake: dict) -> None:
    path = dq_results.results_path(lake["sink_uri"])
    shutil.rmtree(path)
    for ts in range(1, 4):
        dq_results.append(lake["sink_uri"], "orders", ts, "barrier", "count", {
            "shop.orders": {"results": [{"expectation": "row_count", "success": True, "observed": ts}]}})
    out = upkeep.maintain_dq_results(upkeep.list_changefeeds(), 0, enforce_retention_duration=False)
    rep = out["sinks"][lake["sink_uri"]]
    assert rep["path"] == path and rep["leases"] == ["orders"] and rep["compact"]["files_after"] == 1
    assert rep["vacuum"]["files_deleted"] == 3
    assert (Path(path) / "_delta_log" / f"{rep['checkpoint_version']:020d}.checkpoint.parquet").is_file()
    # A sink without results yet is said so.
    shutil.rmtree(path)
    assert upkeep.maintain_dq_results(upkeep.list_changefeeds(), 0)["sinks"][lake["sink_uri"]] == {
        "skipped": True, "reason": "no data-quality results yet"}


def test_a_table_waits_for_its_changefeeds_window(lake: dict) -> None:
    lease.acquire("orders", "airflow:run-1", target_ts=lake["checkpoint"] + 1)
    table = {"path": str(lake["sink"] / "shop" / "items"), "name": "shop.items", "changefeed_ids": ["orders"]}
    with pytest.raises(lease.LeaseBusy):
        with upkeep.window_leases(["orders"], wait_s=0.0):
            pass
    lease.release("orders", "airflow:run-1")
    assert upkeep.maintain_table(table, 168)["leases"] == ["orders"]


def test_bronze_retention_is_called_with_checkpoint_minus_retention(lake: dict,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple] = []
    monkeypatch.setattr(retention, "prune_changelog",
                        lambda sink, cid, keep: calls.append(("prune", sink, cid, keep)) or {"windows": [1]})
    monkeypatch.setattr(retention, "remove_trash", lambda sink, days: calls.append(("trash", sink, days)) or [])
    monkeypatch.setattr(retention, "fold_changelog",
                        lambda cid, keep: calls.append(("fold", cid, keep)) or {"folded": False})
    cfs = upkeep.list_changefeeds()
    out = upkeep.prune_bronze([*cfs, {"changefeed_id": "new", "sink_uri": "x", "checkpoint_ts": 0}], 2)
    keep = tso.compose(tso.physical_ms(lake["checkpoint"]) - 2 * 3_600_000)
    # a running changefeed's windows are folded into a snapshot first (under its lease), then pruned
    assert calls == [("fold", "orders", keep), ("prune", lake["sink_uri"], "orders", keep)]
    assert out["changefeeds"]["orders"] == {"keep_after_ts": keep, "fold": {"folded": False},
                                            "result": {"windows": [1]}}
    assert out["changefeeds"]["new"]["skipped"]
    # a retention longer than the checkpoint's age (from the epoch) prunes nothing
    assert upkeep.keep_after_ts(tso.compose(1000), 1) is None
    assert upkeep.remove_rebuild_trash(cfs, 7)["sinks"] == {lake["sink_uri"]: []}
    assert calls[-1] == ("trash", lake["sink_uri"], 7)


def test_bronze_retention_without_a_complete_snapshot_prunes_nothing(lake: dict) -> None:
    out = upkeep.prune_bronze(upkeep.list_changefeeds(), 1)
    assert out["skipped"] is False and out["changefeeds"]["orders"]["result"]["windows"] == []


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
        cfs = upkeep.list_changefeeds()
        out = upkeep.refresh_gc_safe_points(cfs, ttl_hours=1)
        assert out["changefeeds"]["orders"]["action"] == "refresh" and out["changefeeds"]["orders"]["in_force"]
        assert live()["cdcflow-orders"] == lake["checkpoint"]
        with locked_state("orders") as st:
            st.state = "finished"
        out = upkeep.refresh_gc_safe_points(upkeep.list_changefeeds(), ttl_hours=1)
        assert out["changefeeds"]["orders"] == {"action": "remove", "state": "finished", "ok": True}
        assert "cdcflow-orders" not in live()
    finally:
        for k, v in sorted(others.items(), key=lambda kv: kv[1]):
            update(k, 3600, v)
