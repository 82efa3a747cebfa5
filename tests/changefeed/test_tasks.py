"""The window's steps (``tasks``) with no upstream: each step loads its changefeed's config once and hands it
down (``publish`` finishes a changefeed at its target-ts by it, and refreshes the GC safe point at its upstream)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_core.changefeed import config as cfgmod
from cdc_core.changefeed import ddl_puller, gc_safepoint, tasks
from cdc_core.changefeed.state import create_state, load_state

START = 1000


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    cfgmod.save_config(cfgmod.parse_config(
        f'changefeed-id = "cf"\nsink-uri = "file://{tmp_path}/lake"\nstart-ts = {START}\ntarget-ts = {START + 5}\n'
        'pd = ["127.0.0.1:1"]\n[filter]\nrules = ["shop.*"]\n'))
    create_state("cf", START)
    ddl_puller.SchemaLog("cf", [], START).save()
    return tmp_path


def test_publish_loads_the_config_once_and_finishes_the_changefeed_at_its_target(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tasks.plan("cf", interval_end_ts=None, target_ts=START + 5)
    loads: list[str] = []
    real = tasks.load_config

    def counted(changefeed_id: str) -> cfgmod.ChangefeedConfig:
        loads.append(changefeed_id)
        return real(changefeed_id)

    refreshed: list[tuple[str, int, str | None]] = []
    monkeypatch.setattr(tasks, "load_config", counted)
    monkeypatch.setattr(cfgmod, "load_config", counted)  # what gc_safepoint would load the config with
    monkeypatch.setattr(gc_safepoint, "refresh_service_safe_point",
                        lambda pd, cid, ts, ttl: refreshed.append((cid, ts, pd)))
    out = tasks.publish(p, {"tables": {}}, {"passed": True})
    assert out["checkpoint_ts"] == START + 5 and load_state("cf").state == "finished"
    assert loads == ["cf"] and refreshed == [("cf", START + 5, "127.0.0.1:1")]
