"""The distributed deployment (``topology.py``, what docker-compose.yml runs) end to end: Airflow's scheduler hands
a changefeed's tasks to two Celery workers through Redis, the tasks submit their Spark jobs to a standalone master
whose executors, on two workers, write Delta through delta-spark, and the upstream's stores are reached at the
addresses PD publishes (127.0.0.2, 127.0.0.3). A scheduled window and a backfill run through it; after each, the
Delta tables as of the window's end equal the upstream snapshot.

In file order: the deployment is up where it says, then a scheduled run, then a backfill (the DAG stays unpaused,
as in production, so a backfill run waits on the window lease between scheduled runs).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cdc_core.changefeed import lease
from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import tso
from testkit.airflow_feed import AirflowFeed, interval_end_ts, next_boundary, sleep_past, wait_for
from testkit.e2e import delta_rows_at

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

CF = "dist"
DAG_ID = f"cdcflow__{CF}"
DB = "dist"
EVERY_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from testkit.topology import running

    # The upstream's SQL takes root with a password only (as compose runs it): this process logs in with it too.
    with running(tmp_path_factory.mktemp("topology")) as t:
        yield t


def assert_ran_on_the_cluster(feed: AirflowFeed, run: dict[str, Any]) -> None:
    """Every task of ``run`` went through a Celery worker, and every MERGE of the window was delta-spark's (on the
    executors: the change set never reaches a driver)."""
    cluster = feed.server
    tis = cluster.task_instances(DAG_ID, run["dag_run_id"])
    logs = "".join(p.log.read_text(errors="replace") for p in cluster.procs if p.name.startswith("airflow-worker"))
    ran = [t for t, ti in tis.items() if ti["state"] == "success"]
    assert ran and all(f"task_id='{t}'" in logs and run["dag_run_id"] in logs for t in ran), (
        f"tasks {ran} of {run['dag_run_id']} not in the Celery workers' logs")
    for table in feed.TABLES:
        log = feed.sink / DB / table / "_delta_log"
        infos = [json.loads(line)["commitInfo"] for f in sorted(log.glob("*.json"))
                 for line in f.read_text().splitlines() if '"commitInfo"' in line]
        merges = [i for i in infos if i.get("operation") == "MERGE"]
        assert merges and all("Delta-Lake" in i.get("engineInfo", "") for i in merges), (table, infos[-3:])


@pytest.fixture(scope="module")
def feed(cluster: Any) -> AirflowFeed:
    f = AirflowFeed(cluster, cluster.upstream_pd, cluster.cdc_home, CF, DB)
    f.create(EVERY_S)
    cluster.wait_dag(DAG_ID)
    return f


def test_every_service_is_where_the_topology_says(cluster: Any) -> None:
    with UpstreamClient(cluster.upstream_pd) as c:
        stores = c.all_stores()
    import pymysql

    host, _, port = cluster.addresses["upstream:mysql"].rpartition(":")
    with pytest.raises(pymysql.err.OperationalError) as denied:
        pymysql.connect(host=host, port=int(port), user="root", password="")  # as compose: a password, no default
    assert denied.value.args[0] == 1045
    assert sorted(s.address.rsplit(":", 1)[0] for s in stores) == list(cluster.STORE_HOSTS)
    assert sorted(w["host"] for w in cluster.spark_workers()) == list(cluster.SPARK_WORKER_HOSTS)
    assert cluster._celery_workers_up()


def test_a_scheduled_window_runs_on_the_cluster(feed: AirflowFeed) -> None:
    cluster = feed.server
    feed.batch(50)
    written = feed.now_ts()
    cluster.set_paused(DAG_ID, False)
    run = wait_for(lambda: sorted((r for r in cluster.runs(DAG_ID) if r["run_type"] == "scheduled"
                                    and interval_end_ts(r) >= written), key=lambda r: r["data_interval_end"]),
                    240, "a scheduled run whose interval ends after the batch")[0]
    run = cluster.wait_run(DAG_ID, run["dag_run_id"], timeout_s=900)
    feed.assert_ok(run)
    end = interval_end_ts(run)
    # (An earlier run whose interval ended between the batch's commit and `written` may have pulled it: the rows
    # are what count.)
    assert feed.checkpoint() >= end
    feed.assert_equal_at(end)
    assert delta_rows_at(feed.sink, DB, "orders", "id", end), "the batch did not reach Delta"
    assert_ran_on_the_cluster(feed, run)
    # Executors ran on both Spark workers (each keeps an app-* directory per application it ran executors for).
    for work in cluster.spark_workdirs:
        assert list(work.glob("app-*/*/stderr")), f"no executor ran on the Spark worker of {work}"


def test_a_backfill_runs_on_the_cluster(feed: AirflowFeed, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backfill of one past interval while the checkpoint is behind it (a long window in flight holds the lease):
    its run applies its interval on the cluster, ahead of the scheduled runs waiting with it."""
    cluster = feed.server
    monkeypatch.setenv("CDCFLOW_HOME", str(cluster.cdc_home))
    holder = "test:holder"
    lease.wait_acquire(CF, holder, timeout_s=900, target_ts=0)
    try:
        b1 = next_boundary(datetime.now(UTC), EVERY_S)
        sleep_past(b1)
        feed.batch(50)
        b2 = b1 + timedelta(seconds=EVERY_S)
        sleep_past(b2)
        assert feed.checkpoint() < tso.from_datetime(b1)
        before = {r["dag_run_id"] for r in cluster.runs(DAG_ID)}
        proc = cluster.cli("backfill", "create", "--dag-id", DAG_ID, "--from-date", b1.isoformat(),
                           "--to-date", b1.isoformat())
        assert proc.returncode == 0, proc.stdout + proc.stderr
        new = wait_for(lambda: [r for r in cluster.runs(DAG_ID)
                                 if r["run_type"] == "backfill" and r["dag_run_id"] not in before], 120,
                        "the backfill's run")
        assert len(new) == 1
        owner = f"airflow:{DAG_ID}:{new[0]['dag_run_id']}"
        wait_for(lambda: owner in lease.waiters(CF), 600, "the backfill run queued on the lease")
    finally:
        lease.release(CF, holder)
    run = cluster.wait_run(DAG_ID, new[0]["dag_run_id"], timeout_s=900)
    feed.assert_ok(run)
    end = interval_end_ts(run)
    assert end == tso.from_datetime(b2, end_of_ms=True)
    plan = cluster.xcom(DAG_ID, run["dag_run_id"], "plan")
    assert plan["target_ts"] == end and plan["skip"] is False, plan
    assert cluster.xcom(DAG_ID, run["dag_run_id"], "pull")["events"] > 0
    feed.assert_equal_at(end)
    assert_ran_on_the_cluster(feed, run)
