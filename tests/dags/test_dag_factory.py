"""The changefeed DAGs: what the changefeeds' bundle and the dags folder yield for a CDCFLOW_HOME, and what the
tasks pass on (``cdcflow_airflow.window_tasks``, the task bodies).

No Airflow DB and no `airflow dags test` here: parsing, structure, params, timetable, and the task
bodies called with a fake context and a fake ``cdc_core.changefeed.tasks``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

from airflow.dag_processing.dagbag import DagBag  # noqa: E402
from airflow.sdk import CronDataIntervalTimetable  # noqa: E402
from airflow.sdk.exceptions import (  # noqa: E402
    ParamValidationError,
)
from cdcflow_airflow import bundle, dag_factory, window_tasks  # noqa: E402

from cdc_core.changefeed.window_plan import WindowPlan  # noqa: E402
from cdc_core.codec import tso  # noqa: E402
from cdc_core.errors import ConfigError  # noqa: E402

START_TS = tso.from_datetime(datetime(2026, 11, 22, 10, 51, 12, 345_000, tzinfo=UTC)) + 7
ORDERS = f"""\
changefeed-id = "orders"
sink-uri = "file:///lake/orders"
start-ts = {START_TS}

[airflow]
schedule = "*/5 * * * *"
"""

USERS = """\
changefeed-id = "users"
sink-uri = "file:///lake/users"

[airflow]
schedule = "@hourly"
catchup = true
"""


@pytest.fixture
def cdcflow_home(tmp_path, monkeypatch):
    d = tmp_path / "changefeeds"
    d.mkdir()
    (d / "orders.toml").write_text(ORDERS)
    (d / "users.toml").write_text(USERS)
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("CDCFLOW_TASK_RETRIES", raising=False)
    return tmp_path


def changefeed_bag() -> DagBag:
    """What the dag processor parses of the changefeed bundle: its folder, synced with the configs."""
    folder = bundle.default_path()
    bundle.sync_dag_files(folder)
    return DagBag(dag_folder=str(folder), safe_mode=True)


@pytest.fixture
def with_bundle(monkeypatch):
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", bundle.bundle_config_list())


@pytest.fixture
def dagbag(cdcflow_home, with_bundle):
    return changefeed_bag()


@pytest.fixture
def dag(dagbag):
    return dagbag.dags["cdcflow__orders"]


def test_one_dag_file_and_one_dag_per_changefeed(dagbag, cdcflow_home):
    assert dagbag.import_errors == {}
    assert sorted(dagbag.dag_ids) == ["cdcflow__orders", "cdcflow__users"]
    files = sorted(p.name for p in (cdcflow_home / "airflow-dags").iterdir())
    assert files == ["cdcflow_changefeed__orders.py", "cdcflow_changefeed__users.py"]


def test_the_dags_folder_has_the_maintenance_dag_and_names_the_bundle_when_it_is_missing(cdcflow_home, monkeypatch):
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", bundle.bundle_config_list())
    bag = DagBag(dag_folder=str(ROOT / "dags"), safe_mode=True)
    assert bag.import_errors == {} and bag.dag_ids == ["cdcflow__maintenance"]
    monkeypatch.delenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST")
    bag = DagBag(dag_folder=str(ROOT / "dags"), safe_mode=True)
    (where, error), = bag.import_errors.items()
    assert where.endswith("cdcflow_changefeeds.py") and "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST" in error
    assert bundle.CLASSPATH in error


def test_no_changefeeds_no_dags(tmp_path, monkeypatch, with_bundle):
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    bag = changefeed_bag()
    assert bag.import_errors == {} and bag.dag_ids == []


def _create(config: Path) -> subprocess.CompletedProcess[str]:
    """``cdcflow changefeed create --config config`` as a user runs it."""
    return subprocess.run([str(ROOT / ".venv" / "bin" / "cdcflow"), "changefeed", "create", "--config", str(config)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"})


@pytest.mark.parametrize(("text", "says"), [
    ('changefeed-id = "broken"\n', "`sink-uri` is required"),
    ('changefeed-id = "broken"\nsink-uri = "file:///l"\n[airflow]\nschedule = "every five minutes"\n',
     "neither a duration"),
    ('changefeed-id = "broken"\nsink-uri = "file:///l"\n[filter]\nrules = ["a.b.c.d"]\n', "[filter]"),
])
def test_a_broken_config_is_an_import_error_of_its_own_and_create_refuses_it_alike(cdcflow_home, with_bundle, text,
                                                                                  says):
    broken = cdcflow_home / "changefeeds" / "broken.toml"
    broken.write_text(text)
    bag = changefeed_bag()
    # The other changefeeds keep their DAGs; the broken one is an import error of its own file.
    assert sorted(bag.dag_ids) == ["cdcflow__orders", "cdcflow__users"]
    (where, error), = bag.import_errors.items()
    assert where.endswith("cdcflow_changefeed__broken.py")
    message = error.strip().splitlines()[-1].removeprefix("cdc_core.errors.").removeprefix("ConfigError: ")
    assert says in message and str(broken) in message, error
    # `cdcflow changefeed create` refuses the same file with the same message.
    result = _create(broken)
    shown = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0 and " ".join(message.split()) in shown and "Traceback" not in shown, shown
    # Fixed, it is a DAG at the next parse, and the error is gone; removed, so is its DAG file.
    broken.write_text('changefeed-id = "broken"\nsink-uri = "file:///l"\n')
    bag = changefeed_bag()
    assert bag.import_errors == {} and "cdcflow__broken" in bag.dag_ids
    broken.unlink()
    assert sorted(changefeed_bag().dag_ids) == ["cdcflow__orders", "cdcflow__users"]
    assert not (cdcflow_home / "airflow-dags" / "cdcflow_changefeed__broken.py").exists()


def test_a_config_not_named_for_its_id_is_an_import_error(cdcflow_home, with_bundle):
    (cdcflow_home / "changefeeds" / "copy.toml").write_text(ORDERS)  # a second config with the id "orders"
    bag = changefeed_bag()
    (where, error), = bag.import_errors.items()
    assert where.endswith("cdcflow_changefeed__copy.py") and "is not the file's name" in error
    assert sorted(bag.dag_ids) == ["cdcflow__orders", "cdcflow__users"]


def test_tasks_and_order(dag):
    assert [t.task_id for t in dag.topological_sort()] == ["plan", "wait", "pull", "apply_check", "publish"]
    up = {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks}
    assert up == {
        "plan": [],
        "wait": ["plan"],
        "pull": ["plan", "wait"],
        "apply_check": ["plan", "pull"],
        "publish": ["apply_check", "plan"],
    }


def test_dag_settings(dagbag):
    orders, users = dagbag.dags["cdcflow__orders"], dagbag.dags["cdcflow__users"]
    for d in (orders, users):
        assert d.max_active_runs == 1
        assert sorted(d.tags) == ["cdc", "cdcflow"]
        assert d.owner == "cdcflow"
        assert isinstance(d.timetable, CronDataIntervalTimetable)
        for t in d.tasks:
            assert t.retries == 3 and t.retry_exponential_backoff == 2.0
            assert t.execution_timeout == dag_factory.TASK_TIMEOUTS[t.task_id]
            assert t.retry_policy is dag_factory.RETRY_POLICY
    assert orders.timetable.expression == "*/5 * * * *" and orders.catchup is False
    assert users.timetable.expression == "0 * * * *" and users.catchup is True
    assert orders.start_date == datetime(2026, 11, 22, 10, 51, tzinfo=UTC)  # start-ts floored to the minute
    assert "file:///lake/orders/<db>/<table>" in orders.doc_md
    assert "file:///lake/users/<db>/<table>" in users.doc_md


def test_sink_credentials_stay_out_of_the_ui():
    cfg = types.SimpleNamespace(
        changefeed_id="s3feed",
        sink_uri="s3://bob:secret@minio:9000/lake?key=abc",
        schedule="@hourly",
        catchup=False,
        start_ts=0,
    )
    d = dag_factory.build_dag(cfg)
    assert "s3://bob:***@minio:9000/lake/<db>/<table>" in d.doc_md
    assert "secret" not in d.doc_md + (d.description or "") and "abc" not in d.doc_md


def test_params_defaults_and_schema(dag):
    params = dag.params
    assert params["target_ts"] is None
    assert params["mode"] == "incremental"
    assert params["tables"] is None
    assert params["dry_run"] is False and params["full_check"] is False
    for name in ("target_ts", "mode", "tables", "full_check", "dry_run"):
        p = params.get_param(name)
        assert p.schema.get("title") and p.description
    assert params.get_param("mode").schema["enum"] == ["incremental", "snapshot", "rebuild"]
    params.validate()


@pytest.mark.parametrize(
    "name, value, ok",
    [
        ("mode", "snapshot", True),
        ("mode", "bogus", False),
        ("target_ts", "470638640000000000", True),
        ("target_ts", "2026-11-22T10:51:00Z", True),
        ("target_ts", "2026-11-22 10:51:00+02:00", True),
        ("target_ts", "yesterday", False),
        ("target_ts", 123, False),
        ("tables", ["shop.orders", "shop.users"], True),
        ("tables", "shop.orders", False),
        ("tables", ["orders"], False),
        ("tables", ["shop.orders.x"], False),
        ("tables", ["shop.orders", "shop.orders"], False),
        ("dry_run", True, True),
        ("dry_run", "yes", False),
    ],
)
def test_param_validation(dag, name, value, ok):
    param = dag.params.get_param(name)
    if ok:
        assert param.resolve(value) == value
    else:
        with pytest.raises(ParamValidationError):
            param.resolve(value)


def test_the_tables_field_picks_from_the_last_windows_tables(cdcflow_home, with_bundle):
    from cdc_core.changefeed.state import create_state, locked_state

    # No window yet: typed names (no pick list).
    assert "examples" not in changefeed_bag().dags["cdcflow__orders"].params.get_param("tables").schema
    create_state("orders", 100)
    with locked_state("orders") as st:
        st.last_window = {"checkpoint_ts": 100, "target_ts": 200, "tables": {"shop.users": {}, "shop.orders": {}}}
    param = changefeed_bag().dags["cdcflow__orders"].params.get_param("tables")
    assert param.schema["type"] == ["null", "array"]
    assert param.schema["examples"] == ["shop.orders", "shop.users"]
    assert param.resolve(["shop.users"]) == ["shop.users"]


def test_serializes_for_the_scheduler(dag):
    from airflow.serialization.serialized_objects import DagSerialization

    back = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert back.timetable.summary == "*/5 * * * *"
    assert back.params["mode"] == "incremental"
    assert sorted(back.task_ids) == sorted(dag_factory.TASK_IDS)


def test_schedule_variants():
    assert dag_factory.timetable_for("none") is None
    assert dag_factory.timetable_for("@once") == "@once"
    assert dag_factory.timetable_for("@daily").expression == "0 0 * * *"
    with pytest.raises(ConfigError, match="5 columns"):
        dag_factory.timetable_for("every five minutes")
    # A duration: fixed-length windows, below cron's one minute too.
    from airflow.sdk import DeltaDataIntervalTimetable

    assert dag_factory.timetable_for("20s") == DeltaDataIntervalTimetable(timedelta(seconds=20))
    assert dag_factory.timetable_for("5m") == DeltaDataIntervalTimetable(timedelta(minutes=5))
    with pytest.raises(ConfigError, match="shorter than"):
        dag_factory.timetable_for("1s")


def test_retries_can_be_turned_off_for_dags_test(monkeypatch):
    cfg = types.SimpleNamespace(changefeed_id="a", sink_uri="/l", schedule="@hourly", catchup=False, start_ts=0)
    monkeypatch.setenv("CDCFLOW_TASK_RETRIES", "0")
    assert {t.retries for t in dag_factory.build_dag(cfg).tasks} == {0}
    monkeypatch.setenv("CDCFLOW_TASK_RETRIES", "many")
    with pytest.raises(ValueError, match="CDCFLOW_TASK_RETRIES"):
        dag_factory.build_dag(cfg)


# --- task bodies -----------------------------------------------------------------------------------


class FakeTasks(types.ModuleType):
    """Stands in for cdc_core.changefeed.tasks and records its calls."""

    def __init__(self, checkpoint_ts: int = 0) -> None:
        super().__init__("cdc_core.changefeed.tasks")
        self.checkpoint_ts = checkpoint_ts
        self.calls: list[tuple] = []

    def plan(self, changefeed_id, *, interval_end_ts, target_ts=None, mode="incremental", tables=None, run_tag=None,
             full_check=False):
        self.calls.append(("plan", changefeed_id, interval_end_ts, target_ts))
        self.plan_kwargs = {"mode": mode, "tables": tables, "run_tag": run_tag, "full_check": full_check}
        t = min(b for b in (interval_end_ts, target_ts) if b)
        skip = t <= self.checkpoint_ts
        reason = f"window already covered by checkpoint {self.checkpoint_ts} >= target {t}" if skip else ""
        return WindowPlan(changefeed_id=changefeed_id, sink_uri="file:///lake", checkpoint_ts=self.checkpoint_ts,
                          target_ts=t, skip=skip, reason=reason)

    def pull(self, plan):
        self.calls.append(("pull",))
        return {"events": 1}

    def apply(self, plan):
        self.calls.append(("apply",))
        return {"shop.orders": {"rows": 1}}

    def check(self, plan):
        self.calls.append(("check",))
        return {"ok": True}

    def publish(self, plan, applied, checked):
        self.calls.append(("publish", applied, checked))
        return {"checkpoint_ts": plan.target_ts}


@pytest.fixture
def fake_tasks(monkeypatch):
    import cdc_core.changefeed

    fake = FakeTasks()
    monkeypatch.setitem(sys.modules, "cdc_core.changefeed.tasks", fake)
    monkeypatch.setattr(cdc_core.changefeed, "tasks", fake, raising=False)
    return fake


def _context(dag, end=None, run_after=None, **params):
    return {
        "params": {**{k: dag.params[k] for k in dag.params}, **params},
        "data_interval_end": end,
        "dag_run": types.SimpleNamespace(run_after=run_after),
    }


def _call(dag, task_id, *args, **context):
    return dag.get_task(task_id).python_callable(*args, **context)


def test_plan_converts_the_interval_end_to_tso(dag, fake_tasks):
    end = datetime(2026, 11, 22, 12, 5, tzinfo=UTC)
    plan = _call(dag, "plan", **_context(dag, end=end))
    expected = (int(end.timestamp() * 1000) << 18) | ((1 << 18) - 1)  # last ts of 12:05:00.000
    assert expected == tso.from_datetime(end, end_of_ms=True) == 470639994470662143
    assert fake_tasks.calls == [("plan", "orders", expected, None)]
    assert plan["target_ts"] == expected and plan["skip"] is False


def test_plan_passes_params_target_ts_instead_of_the_interval_end(dag, fake_tasks):
    # An explicit target_ts is the window end the person asked for; the data interval does not cap it.
    end = datetime(2026, 11, 22, 12, 5, tzinfo=UTC)
    _call(dag, "plan", **_context(dag, end=end, target_ts="123"))
    _call(dag, "plan", **_context(dag, end=end, target_ts="2026-11-22T12:01:00"))
    assert fake_tasks.calls[0][2:] == (None, 123)
    assert fake_tasks.calls[1][3] == tso.from_datetime(datetime(2026, 11, 22, 12, 1, tzinfo=UTC), end_of_ms=True)


def test_plan_without_data_interval_uses_run_after(dag, fake_tasks):
    run_after = datetime(2026, 11, 22, 12, 7, 30, tzinfo=UTC)
    _call(dag, "plan", **_context(dag, end=None, run_after=run_after))
    assert fake_tasks.calls[0][2] == tso.from_datetime(run_after, end_of_ms=True)


def test_plan_passes_mode_tables_and_the_backfill_tag(dag, fake_tasks):
    ctx = _context(dag, end=datetime(2026, 1, 1, tzinfo=UTC), mode="rebuild", tables=["shop.orders"])
    ctx["dag_run"] = types.SimpleNamespace(run_after=None, backfill_id=7, dag_id="cdcflow__orders", run_id="bf1")
    plan = _call(dag, "plan", **ctx)
    assert fake_tasks.plan_kwargs == {"mode": "rebuild", "tables": ["shop.orders"], "run_tag": "backfill-7",
                                      "full_check": False}
    assert plan["lease_owner"] == "airflow:cdcflow__orders:bf1"
    from cdc_core.changefeed import lease

    lease.release("orders", plan["lease_owner"])
    # Not a backfill: no tag, so every rebuild run rebuilds.
    _call(dag, "plan", **_context(dag, end=datetime(2026, 1, 1, tzinfo=UTC), mode="snapshot", full_check=True))
    assert fake_tasks.plan_kwargs == {"mode": "snapshot", "tables": None, "run_tag": None, "full_check": True}


def test_a_backfill_run_is_tagged_by_its_conf_without_a_backfill_id():
    # Airflow 3.3's task context: the DagRun model the task runner gets, which has no backfill_id.
    from airflow.sdk.api.datamodels._generated import DagRun, DagRunState, DagRunType

    def run(run_type: DagRunType, conf: dict | None, run_id: str) -> dict:
        now = datetime(2026, 11, 23, tzinfo=UTC)
        return {"dag_run": DagRun(dag_id="cdcflow__orders", run_id=run_id, logical_date=now, data_interval_start=now,
                                  data_interval_end=now, run_after=now, start_date=now, end_date=None,
                                  run_type=run_type, state=DagRunState.RUNNING, conf=conf,
                                  consumed_asset_events=[], partition_key=None)}

    assert not hasattr(run(DagRunType.BACKFILL, None, "x")["dag_run"], "backfill_id")
    rebuild = {"mode": "rebuild", "tables": ["shop.orders"]}
    first = window_tasks.run_tag_for(run(DagRunType.BACKFILL, rebuild, "backfill__2026-11-23T00:00:00+00:00"))
    second = window_tasks.run_tag_for(run(DagRunType.BACKFILL, dict(reversed(rebuild.items())),
                                         "backfill__2026-11-23T00:05:00+00:00"))
    assert first is not None and first.startswith("backfill-") and first == second  # one backfill, one tag
    assert window_tasks.run_tag_for(run(DagRunType.BACKFILL, {"mode": "rebuild"}, "b")) != first
    assert window_tasks.run_tag_for(run(DagRunType.MANUAL, rebuild, "manual__1")) is None
    assert window_tasks.run_tag_for(run(DagRunType.SCHEDULED, None, "scheduled__1")) is None


def test_runs_take_turns_through_the_window_lease(dag, fake_tasks):
    from cdc_core.changefeed import lease

    ctx = _context(dag, end=datetime(2026, 11, 22, 12, 5, tzinfo=UTC))
    ctx["dag_run"] = types.SimpleNamespace(run_after=None, dag_id="cdcflow__orders", run_id="r1")
    plan = _call(dag, "plan", **ctx)
    assert lease.holder("orders").owner == "airflow:cdcflow__orders:r1"
    # A second run cannot plan while r1's window is open (it would wait; here it may not wait at all).
    other = _context(dag, end=datetime(2026, 11, 22, 12, 10, tzinfo=UTC))
    other["dag_run"] = types.SimpleNamespace(run_after=None, dag_id="cdcflow__orders", run_id="r2")
    orig = window_tasks.LEASE_WAIT
    window_tasks.LEASE_WAIT = type(orig)(0)
    try:
        with pytest.raises(lease.LeaseBusy, match="r1"):
            _call(dag, "plan", **other)
    finally:
        window_tasks.LEASE_WAIT = orig
    for task_id in ("pull", "apply_check"):
        _call(dag, task_id, plan, **ctx)
    _call(dag, "publish", plan, {"apply": {}, "check": {}}, **ctx)
    assert lease.holder("orders") is None  # published: the next run may plan


def test_a_skipped_plan_does_not_keep_the_lease(dag, fake_tasks):
    from cdc_core.changefeed import lease

    fake_tasks.checkpoint_ts = 10**18
    _call(dag, "plan", **_context(dag, end=datetime(2026, 11, 22, 12, 5, tzinfo=UTC)))
    assert lease.holder("orders") is None


def test_a_task_whose_run_lost_the_lease_refuses(dag, fake_tasks):
    from cdc_core.changefeed import lease
    from cdc_core.errors import ChangefeedError

    ctx = _context(dag, end=datetime(2026, 11, 22, 12, 5, tzinfo=UTC))
    plan = _call(dag, "plan", **ctx)
    lease.release("orders", plan["lease_owner"])
    lease.acquire("orders", "cli:elsewhere:1")
    with pytest.raises(ChangefeedError, match="no longer holds the window lease"):
        _call(dag, "apply_check", plan, **ctx)


def test_chain_runs_the_core_tasks(dag, fake_tasks):
    ctx = _context(dag, end=datetime(2026, 11, 22, 12, 5, tzinfo=UTC))
    plan = _call(dag, "plan", **ctx)
    _call(dag, "pull", plan, **ctx)
    applied_checked = _call(dag, "apply_check", plan, **ctx)
    assert applied_checked == {"skipped": False, "apply": {"shop.orders": {"rows": 1}}, "check": {"ok": True}}
    out = _call(dag, "publish", plan, applied_checked, **ctx)
    assert [c[0] for c in fake_tasks.calls] == ["plan", "pull", "apply", "check", "publish"]
    assert fake_tasks.calls[-1][1:] == (applied_checked["apply"], applied_checked["check"])
    assert out == {"checkpoint_ts": plan["target_ts"], "asset_events": []}  # no outlet accessor in this context


class _AliasEvents:
    def __init__(self) -> None:
        self.added: list[tuple[Any, dict]] = []

    def add(self, asset: Any, extra: dict | None = None) -> None:
        self.added.append((asset, extra or {}))


def test_publish_emits_an_asset_event_per_changed_table(dag):
    publish = dag.get_task("publish")
    assert [o.name for o in publish.outlets] == ["cdcflow__orders"]  # an AssetAlias: tables come at run time
    events: dict[Any, _AliasEvents] = {}

    class Accessors(dict):
        def __getitem__(self, key):
            return events.setdefault(key, _AliasEvents())

    plan = WindowPlan(changefeed_id="orders", sink_uri="file:///lake/orders", checkpoint_ts=100, target_ts=200)
    published = {"skipped": False, "checkpoint_ts": 200, "tables": {
        "shop.orders": {"rows_upserted": 3, "rows_deleted": 1, "skipped": False, "delta_version": 7},
        "shop.users": {"rows_upserted": 0, "rows_deleted": 0, "skipped": True},
    }}
    emitted = window_tasks.emit_asset_events(plan, published, {"outlet_events": Accessors()})
    assert emitted == ["file:///lake/orders/shop/orders"]
    [(asset, extra)] = events[window_tasks.asset_alias_for("orders")].added
    assert asset.uri == "file:///lake/orders/shop/orders" and asset.group == "delta"
    assert extra == {"changefeed_id": "orders", "table": "shop.orders", "checkpoint_ts": 200, "window_start_ts": 100,
                     "rows_upserted": 3, "rows_deleted": 1, "delta_version": 7}
    assert window_tasks.emit_asset_events(plan, {"skipped": True}, {"outlet_events": Accessors()}) == []


def test_skipped_plan_makes_the_rest_a_logged_no_op(dag, fake_tasks, caplog):
    fake_tasks.checkpoint_ts = tso.MAX_TS
    ctx = _context(dag, end=datetime(2026, 11, 22, 12, 5, tzinfo=UTC))
    plan = _call(dag, "plan", **ctx)
    assert plan["skip"] is True
    caplog.clear()
    with caplog.at_level("INFO", logger="cdcflow.airflow"):
        outs = [_call(dag, t, plan, **ctx) for t in ("pull", "apply_check")]
        outs.append(_call(dag, "publish", plan, outs[1], **ctx))
    assert [c[0] for c in fake_tasks.calls] == ["plan"]
    assert all(o["skipped"] for o in outs)
    assert caplog.text.count("window already covered by checkpoint") == 3


def test_dry_run_plans_only(dag, fake_tasks):
    ctx = _context(dag, end=datetime(2026, 11, 22, 12, 5, tzinfo=UTC), dry_run=True)
    plan = _call(dag, "plan", **ctx)
    assert _call(dag, "pull", plan, **ctx)["reason"].startswith("dry run")
    assert [c[0] for c in fake_tasks.calls] == ["plan"]



def test_every_airflow_the_project_starts_is_given_the_bundle():
    """``make airflow``/``make demo`` (scripts/airflow_env.sh) and the compose deployment set the bundle list to
    ``bundle_config_list()`` (the tests' Airflow harnesses import it)."""
    import json

    import yaml

    want = json.loads(bundle.bundle_config_list())
    shell = subprocess.run(["sh", "-c", f". {ROOT}/scripts/airflow_env.sh && printenv {bundle.ENV}"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    assert json.loads(shell) == want
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert json.loads(compose["x-cdcflow"]["environment"][bundle.ENV]) == want
