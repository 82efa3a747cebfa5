"""The window plan as XCom carries it: ``to_xcom`` gives JSON that ``from_xcom`` reads back into an equal plan, and a
malformed one is refused naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cdc_core.changefeed.window_plan import RebuildPlan, SnapshotPlan, WindowPlan
from cdc_core.errors import ChangefeedError

BASE = WindowPlan(changefeed_id="cf", sink_uri="file:///lake", checkpoint_ts=10, target_ts=2**64 - 1)
PLANS = [
    BASE,
    WindowPlan(changefeed_id="cf", sink_uri="s", checkpoint_ts=10, target_ts=10, skip=True, reason="covered",
               has_window=False),
    WindowPlan(changefeed_id="cf", sink_uri="s", checkpoint_ts=10, target_ts=20, mode="snapshot",
               tables=("SHOP.Orders",), full_check=True, lease_owner="airflow:d:r",
               snapshot=SnapshotPlan(id="s1", ts=10, tables=("shop.orders",), all_tables=False, initial=False)),
    WindowPlan(changefeed_id="cf", sink_uri="s", checkpoint_ts=10, target_ts=10, mode="rebuild", has_window=False,
               requested_mode="incremental", run_tag="backfill-1",
               rebuild=RebuildPlan(id="r1", ts=10, tag=None, tables=("shop.a", "shop.b"), all_tables=True,
                                   noop=True, reason="already rebuilt", resume=True)),
]


@pytest.mark.parametrize("plan", PLANS, ids=["incremental", "skipped", "snapshot", "rebuild"])
def test_a_plan_reads_back_from_its_json(plan: WindowPlan) -> None:
    xcom = json.loads(json.dumps(plan.to_xcom()))
    assert WindowPlan.from_xcom(xcom) == plan and xcom["target_ts"] == plan.target_ts


def test_fields_a_plan_may_lack_take_what_the_steps_assumed() -> None:
    core = {"changefeed_id": "cf", "sink_uri": "s", "checkpoint_ts": 10, "target_ts": 20, "skip": False,
            "reason": ""}
    plan = WindowPlan.from_xcom(core)
    assert (plan.mode, plan.has_window, plan.snapshot, plan.rebuild, plan.full_check) == (
        "incremental", True, None, None, False)
    assert not WindowPlan.from_xcom({**core, "target_ts": 10}).has_window


@pytest.mark.parametrize(("change", "message"), [
    ({"target_ts": None}, "window plan: field 'target_ts' is None"),
    ({"checkpoint_ts": True}, "window plan: field 'checkpoint_ts' is True"),
    ({"mode": "full"}, "window plan: field 'mode' is 'full'"),
    ({"tables": "shop.orders"}, "window plan: field 'tables' is 'shop.orders'"),
    ({"tables": [1]}, "window plan: field 'tables' must be table names"),
    ({"snapshot": ["s1"]}, "window plan snapshot: must be an object, got list"),
    ({"snapshot": {"id": "s1", "ts": 10, "tables": [], "all_tables": False}},
     "window plan snapshot: missing field 'initial'"),
    ({"rebuild": {**PLANS[3].to_xcom()["rebuild"], "noop": "yes"}}, "window plan rebuild: field 'noop' is 'yes'"),
])
def test_a_malformed_plan_is_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ChangefeedError, match=message):
        WindowPlan.from_xcom({**BASE.to_xcom(), **change})
    missing = BASE.to_xcom()
    del missing["changefeed_id"]
    with pytest.raises(ChangefeedError, match="window plan: missing field 'changefeed_id'"):
        WindowPlan.from_xcom(missing)
    with pytest.raises(ChangefeedError, match="window plan: must be an object, got str"):
        WindowPlan.from_xcom("plan")


def test_the_lease_owner_is_set_on_a_copy() -> None:
    held = BASE.held_by("airflow:d:r")
    assert held.lease_owner == "airflow:d:r" and BASE.lease_owner is None
