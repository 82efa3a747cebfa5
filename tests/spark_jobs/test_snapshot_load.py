"""The snapshot_load job's arguments: each phase takes its own, checked when built, naming the phase and the
argument (the phases themselves run end to end in tests/e2e/test_snapshot_rebuild.py)."""

from __future__ import annotations

import pytest

from spark_jobs.snapshot_load import DEFAULT_MAX_CHUNKS, BaseLoad, SnapshotJobArgs
from testkit.builders import clustered_table, rowid_table


def test_each_phase_takes_its_own_arguments_and_a_wrong_one_is_named() -> None:
    t, r = clustered_table(), rowid_table()
    common = {"sink_uri": "file:///lake", "changefeed_id": "cf"}
    fetch = SnapshotJobArgs.from_dict({**common, "phase": "fetch", "pd_addr": "127.0.0.1:2379",
                                       "ts": "18446744073709551615", "tables": [t.to_json(), r.to_dict()]})
    assert fetch.tables == (t, r) and fetch.ts == 2**64 - 1 and fetch.max_chunks == DEFAULT_MAX_CHUNKS
    load = SnapshotJobArgs.from_dict({**common, "phase": "load", "loads": [
        {"table": t.to_json(), "base": "/bases/c", "version": 7, "load_id": "snapshot/1"}]})
    assert load.loads == (BaseLoad(t, "/bases/c", 7, "snapshot/1"),) and load.ts is None
    fold = SnapshotJobArgs.from_dict({**common, "phase": "fold", "ts": 9, "tables": [t.to_json()]})
    assert fold.ts == 9 and fold.tables == (t,)

    with pytest.raises(ValueError, match="phase must be 'fetch', 'load' or 'fold', got 'copy'"):
        SnapshotJobArgs.from_dict({**common, "phase": "copy"})
    with pytest.raises(ValueError, match=r"snapshot_load \(fetch\): missing argument\(s\) \['pd_addr'\]"):
        SnapshotJobArgs.from_dict({**common, "phase": "fetch", "ts": 9, "tables": []})
    with pytest.raises(ValueError, match=r"snapshot_load \(fold\): unknown argument\(s\) \['pd_addr'\]"):
        SnapshotJobArgs.from_dict({**common, "phase": "fold", "ts": 9, "tables": [], "pd_addr": "127.0.0.1:2379"})
    with pytest.raises(ValueError, match=r"snapshot_load \(load\): loads\[0\] must be"):
        SnapshotJobArgs.from_dict({**common, "phase": "load", "loads": [t.to_json()]})
    with pytest.raises(ValueError, match=r"snapshot_load \(load\) loads\[0\]: missing argument\(s\) "
                                         r"\['version', 'load_id'\]"):
        SnapshotJobArgs.from_dict({**common, "phase": "load", "loads": [{"table": t.to_json(), "base": "/b"}]})
    with pytest.raises(ValueError, match=r"snapshot_load \(load\) loads\[0\]: unknown argument\(s\) \['ts'\]"):
        SnapshotJobArgs.from_dict({**common, "phase": "load", "loads": [
            {"table": t.to_json(), "base": "/b", "version": 1, "load_id": "x", "ts": 1}]})
    with pytest.raises(ValueError, match="phase must be 'fetch', 'load' or 'fold', got \\['fetch'\\]"):
        SnapshotJobArgs.from_dict({**common, "phase": ["fetch"]})
    for bad in ("64", 0, 2.5):
        with pytest.raises(ValueError, match=r"snapshot_load \(fetch\): max_chunks must be a positive integer"):
            SnapshotJobArgs.from_dict({**common, "phase": "fetch", "pd_addr": "p", "ts": 1, "tables": [],
                                       "max_chunks": bad})
    assert SnapshotJobArgs.from_dict({**common, "phase": "fetch", "pd_addr": "p", "ts": 1, "tables": [],
                                      "max_chunks": 8}).max_chunks == 8
    with pytest.raises(ValueError, match=r"snapshot_load \(load\): loads\[0\]\.version must be an integer ts"):
        SnapshotJobArgs.from_dict({**common, "phase": "load", "loads": [
            {"table": t.to_json(), "base": "/b", "version": "v1", "load_id": "x"}]})
