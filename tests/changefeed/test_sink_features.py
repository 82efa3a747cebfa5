"""The Delta table features cdcflow's hand-made commits honour (``cdc_core/changefeed/sink_features.py``): a table
whose protocol names one they would break is refused, naming the feature and the table; one that is only present
in the protocol, off in the table, is written; the deletion-vector MERGE and the purge check before they write."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.changefeed import sink_features
from cdc_core.errors import ChangefeedError
from cdc_core.schema.model import Column, Index, TableInfo
from spark_jobs.load import delta_log, merge_on_read
from spark_jobs.load.delta_writer import DeltaRsWriter

INFO = TableInfo(id=3, db_name="d", name="t",
                 columns=(Column(1, "id", "bigint", nullable=False), Column(2, "v", "int")),
                 indexes=(Index("PRIMARY", ("id",), unique=True, primary=True),))


def _table(path: Path, **props: str) -> DeltaTable:
    DeltaRsWriter(deletion_vectors=True).ensure_table(str(path), INFO)
    write_deltalake(str(path), pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array([0, 0, 0], pa.int32())}),
                    mode="append")
    dt = DeltaTable(str(path))
    if props:
        dt.alter.set_table_properties(props)
    return DeltaTable(str(path))


def _protocol(path: Path, writer_features: list[str], reader_features: list[str] | None = None) -> DeltaTable:
    """A commit that names ``writer_features`` in the protocol, as a newer writer would have left the table."""
    dt = DeltaTable(str(path))
    reader = sorted({"deletionVectors", *(reader_features or [])})
    delta_log.commit(str(path), dt.version() + 1, [
        delta_log.commit_info("SET TBLPROPERTIES", dt.version(), {}),
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": reader,
                      "writerFeatures": sorted({"deletionVectors", *writer_features})}}])
    return DeltaTable(str(path))


def test_a_table_with_deletion_vectors_only_is_written(tmp_path: Path) -> None:
    dt = _table(tmp_path / "t")
    assert sink_features.unsupported(dt) == []
    sink_features.check_writable(dt, str(tmp_path / "t"))


def test_change_data_feed_on_is_honoured(tmp_path: Path) -> None:
    """The deletion-vector MERGE writes the feed's change data (spark_jobs.load.change_data): a table with it on is
    written, whether the protocol names it as a feature or by a legacy writer version."""
    path = tmp_path / "t"
    dt = _table(path, **{"delta.enableChangeDataFeed": "true"})
    assert "changeDataFeed" in sink_features.protocol_features(dt)
    assert sink_features.unsupported(dt) == []
    sink_features.check_writable(dt, str(path))


def test_append_only_constraints_and_column_mapping_are_named(tmp_path: Path) -> None:
    dt = _table(tmp_path / "a", **{"delta.appendOnly": "true"})
    assert sink_features.unsupported(dt) == ["appendOnly (delta.appendOnly = true: a MERGE removes rows)"]
    dt = _table(tmp_path / "c")
    dt.alter.add_constraint({"v_positive": "v >= 0"})
    assert sink_features.unsupported(DeltaTable(str(tmp_path / "c"))) == ["checkConstraints (CHECK constraints "
                                                                          "['v_positive'])"]


@pytest.mark.parametrize("feature", ["rowTracking", "v2Checkpoint", "clustering", "someFutureFeature"])
def test_a_feature_it_does_not_implement_is_refused_whenever_named(tmp_path: Path, feature: str) -> None:
    path = tmp_path / "t"
    _table(path)
    dt = _protocol(path, [feature], [feature] if feature == "v2Checkpoint" else None)  # a reader-writer feature
    assert sink_features.unsupported(dt) == [f"{feature} (not implemented by cdcflow's hand-made commits)"]


def test_the_vector_merge_and_the_purge_refuse_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "t"
    dt = _table(path)
    dt = _protocol(path, ["rowTracking", "domainMetadata"])
    before = dt.version()
    changes = pa.table({"id": pa.array([2], pa.int64()), "v": pa.array([1], pa.int32()), "_cdc_op": ["upsert"]})
    with pytest.raises(ChangefeedError, match="rowTracking"):
        DeltaRsWriter(deletion_vectors=True).merge(str(path), INFO, changes, app_id="cdcflow/t", version=5)
    with pytest.raises(ChangefeedError, match="the purge of deleted rows does not write: rowTracking"):
        merge_on_read.purge_deleted_rows(str(path), {})
    assert DeltaTable(str(path)).version() == before and DeltaTable(str(path)).transaction_version("cdcflow/t") is None
    assert not [n for n in os.listdir(path) if n.endswith(".parquet") and n not in
                {a["path"] for a in delta_log.live_adds(str(path), before).values()}]  # no file written either


def test_a_legacy_protocol_names_its_features_by_version(tmp_path: Path) -> None:
    path = tmp_path / "legacy"
    write_deltalake(str(path), pa.table({"id": [1]}), configuration={"delta.enableChangeDataFeed": "true"})
    dt = DeltaTable(str(path))
    assert dt.protocol().min_writer_version == 4 and not dt.protocol().writer_features
    assert sink_features.protocol_features(dt) >= {"appendOnly", "invariants", "checkConstraints", "changeDataFeed",
                                                   "generatedColumns"}
    assert sink_features.unsupported(dt) == []  # the feed on is honoured; the others are off
    assert json.loads(dt.schema().to_json())["fields"][0]["name"] == "id"


def test_changefeed_create_checks_the_tables_already_in_the_sink(tmp_path: Path) -> None:
    ok, appends = tmp_path / "ok", tmp_path / "appends"
    _table(ok, **{"delta.enableChangeDataFeed": "true"})
    _table(appends, **{"delta.appendOnly": "true"})
    sink_features.check_sink_tables([str(ok), str(tmp_path / "not-there-yet")])
    with pytest.raises(ChangefeedError, match=rf"silver table {appends} uses Delta table feature\(s\) the "
                                              r"deletion-vector writer does not write: appendOnly"):
        sink_features.check_sink_tables([str(ok), str(appends)])
