"""``tasks.plan`` with a mode and tables: validation, initial-snapshot, resumed rebuilds, backfill de-duplication
(no upstream: the plan is given a target ts and the schema log is written by hand)."""

from __future__ import annotations

import pytest

from cdc_core.changefeed import config as cfgmod
from cdc_core.changefeed import ddl_puller, tasks
from cdc_core.changefeed.state import create_state, locked_state
from cdc_core.errors import ChangefeedError, ConfigError
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import Column, Index, TableInfo

START = 1000


def _t(tid: int, name: str, db: str = "shop") -> TableInfo:
    return TableInfo(id=tid, db_name=db, name=name, db_id=100, pk_is_handle=True,
                     columns=(Column(1, "id", "int", nullable=False),),
                     indexes=(Index("PRIMARY", ("id",), unique=True, primary=True, id=1),))


def _create(home, initial: bool = False) -> None:
    text = (f'changefeed-id = "cf"\nsink-uri = "file://{home}/lake"\nstart-ts = {START}\n'
            f'initial-snapshot = {str(initial).lower()}\n[filter]\nrules = ["shop.*"]\n')
    cfgmod.save_config(cfgmod.parse_config(text))
    create_state("cf", START)
    jobs = [DDLJob(job_id=i, job_type="create table", schema_id=100, table_id=t.id, schema_name=t.db_name,
                   table_name=t.name, query="create table", schema_version=i, table_info=t, finished_ts=START - 10 + i)
            for i, t in enumerate([_t(101, "orders"), _t(102, "items"), _t(103, "other", db="hr")], start=1)]
    ddl_puller.SchemaLog("cf", jobs, START).save()


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    _create(tmp_path)
    return tmp_path


def test_bad_mode_and_tables_with_incremental_fail_in_plan(home):
    with pytest.raises(ConfigError, match=r"unknown mode 'fast'.*incremental, snapshot, rebuild"):
        tasks.plan("cf", interval_end_ts=None, target_ts=START + 5, mode="fast")
    with pytest.raises(ConfigError, match="tables applies to snapshot and rebuild modes only: an incremental window "
                                          "always covers every table so that one checkpoint stays true"):
        tasks.plan("cf", interval_end_ts=None, target_ts=START + 5, tables=["shop.orders"])
    with pytest.raises(ConfigError, match=r"db\.table"):
        tasks.plan("cf", interval_end_ts=None, target_ts=START + 5, mode="snapshot", tables=["orders"])


def test_a_table_that_is_not_replicated_is_named_with_what_is(home):
    with pytest.raises(ConfigError) as ei:
        tasks.plan("cf", interval_end_ts=None, target_ts=START + 5, mode="rebuild", tables=["shop.orders", "hr.other"])
    msg = str(ei.value)
    assert "'hr.other' not replicated by changefeed 'cf'" in msg
    assert "replicated tables: shop.orders, shop.items" in msg


def test_snapshot_and_rebuild_plans(home):
    p = tasks.plan("cf", interval_end_ts=None, target_ts=START + 5, mode="snapshot", tables=["SHOP.Orders"])
    assert p.mode == "snapshot" and p.tables == ("SHOP.Orders",) and p.has_window and not p.skip
    assert p.snapshot.tables == ("shop.orders",) and p.snapshot.ts == START
    assert p.snapshot.all_tables is False and p.rebuild is None
    # A window covered by the checkpoint still snapshots / rebuilds: target = checkpoint, no incremental part.
    p = tasks.plan("cf", interval_end_ts=None, target_ts=START - 1, mode="rebuild", run_tag="bf-1")
    assert not p.skip and not p.has_window and p.target_ts == START
    assert {k: v for k, v in p.rebuild.to_xcom().items() if k != "id"} == {
        "ts": START, "tag": "bf-1", "tables": ["shop.items", "shop.orders"], "all_tables": True, "noop": False,
        "reason": "", "resume": False}
    assert tasks.plan("cf", interval_end_ts=None, target_ts=START - 1).skip  # incremental: nothing to do


def test_backfill_runs_rebuild_once_and_unfinished_rebuilds_resume(home):
    with locked_state("cf") as st:
        st.rebuild = {"ts": START, "tag": "bf-1", "tables": ["shop.items", "shop.orders"], "trash": "x",
                      "moved": [], "done": True}
    p = tasks.plan("cf", interval_end_ts=None, target_ts=START - 1, mode="rebuild", run_tag="bf-1")
    assert p.skip and p.reason.startswith(f"already rebuilt by this backfill (tag bf-1) at checkpoint {START}")
    p = tasks.plan("cf", interval_end_ts=None, target_ts=START + 5, mode="rebuild", run_tag="bf-1")
    assert not p.skip and p.rebuild.noop and p.has_window  # the incremental part still runs
    assert not tasks.plan("cf", interval_end_ts=None, target_ts=START - 1, mode="rebuild", run_tag="bf-2").skip
    # The same tag at another checkpoint (a later backfill with the same conf, or windows applied since): rebuilds.
    with locked_state("cf") as st:
        st.rebuild = {**(st.rebuild or {}), "ts": START - 7}
    p = tasks.plan("cf", interval_end_ts=None, target_ts=START - 1, mode="rebuild", run_tag="bf-1")
    assert not p.skip and not p.rebuild.noop
    # An unfinished rebuild: the next window resumes it whatever it was asked to do; a snapshot must wait.
    with locked_state("cf") as st:
        st.rebuild = {"id": "r1", "ts": START, "tag": None, "tables": ["shop.orders"], "trash": "x", "moved": [],
                      "done": False}
    p = tasks.plan("cf", interval_end_ts=None, target_ts=START + 5)
    assert p.mode == "rebuild" and p.requested_mode == "incremental"
    assert p.rebuild.tables == ("shop.orders",) and p.rebuild.resume and p.rebuild.id == "r1"
    with pytest.raises(ChangefeedError, match="unfinished rebuild"):
        tasks.plan("cf", interval_end_ts=None, target_ts=START + 5, mode="snapshot")


def test_initial_snapshot_makes_the_first_window_a_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    _create(tmp_path, initial=True)
    p = tasks.plan("cf", interval_end_ts=None, target_ts=START + 5)
    assert p.mode == "snapshot" and p.requested_mode == "incremental"
    assert p.snapshot.initial and p.snapshot.all_tables
    assert p.snapshot.tables == ("shop.items", "shop.orders")
    # A re-plan at the same checkpoint resumes the same (unfinished) snapshot id.
    with locked_state("cf") as st:
        st.snapshot = {"id": p.snapshot.id, "ts": START, "tables": list(p.snapshot.tables), "done": False}
    assert tasks.plan("cf", interval_end_ts=None, target_ts=START + 5).snapshot.id == p.snapshot.id
    with locked_state("cf") as st:
        st.initial_snapshot_done = True
    assert tasks.plan("cf", interval_end_ts=None, target_ts=START + 5).mode == "incremental"
