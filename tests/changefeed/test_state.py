import pytest

from cdc_core.changefeed import state
from cdc_core.errors import ChangefeedError


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    return tmp_path


def test_checkpoint_only_moves_forward():
    state.create_state("a", 100)
    assert state.advance_checkpoint("a", 150).checkpoint_ts == 150
    assert state.advance_checkpoint("a", 120).checkpoint_ts == 150
    assert state.load_state("a").checkpoint_ts == 150


def test_error_state_freezes_checkpoint():
    state.create_state("a", 100)
    state.set_error("a", "boom", step="apply")
    with pytest.raises(ChangefeedError, match="in error"):
        state.advance_checkpoint("a", 200)
    st = state.load_state("a")
    assert st.state == "error" and st.checkpoint_ts == 100 and st.error["message"] == "boom"


def test_missing_and_corrupt_state(home):
    with pytest.raises(ChangefeedError, match="no state"):
        state.load_state("zzz")
    (home / "state").mkdir(exist_ok=True)
    (home / "state" / "bad.json").write_text("{not json")
    with pytest.raises(ChangefeedError, match="corrupt"):
        state.load_state("bad")
    assert [s.changefeed_id for s in state.list_states()] == []


def test_state_files_from_before_snapshots_and_rebuilds_still_load(home):
    (home / "state").mkdir(exist_ok=True)
    (home / "state" / "old.json").write_text(
        '{"changefeed_id": "old", "state": "normal", "checkpoint_ts": 5, "resolved_ts": 5, "error": null, '
        '"last_window": null, "last_checks": {}, "updated_at": 1.0}')
    st = state.load_state("old")
    assert st.checkpoint_ts == 5 and st.initial_snapshot_done is False and st.snapshot is None and st.rebuild is None
