import pyarrow as pa
import pytest

from cdc_core.codec import changelog


def _rows(n: int) -> pa.Table:
    return pa.table(
        {
            "region_id": [1] * n, "table_id": [100] * n, "key": [b"k%d" % i for i in range(n)],
            "op": ["put"] * n, "start_ts": list(range(n)), "commit_ts": [i + 1 for i in range(n)],
            "value": [b"{}"] * n, "old_value": [None] * n,
        },
        schema=changelog.SCHEMA,
    )


def test_write_read_list(tmp_path):
    sink = f"file://{tmp_path}"
    changelog.write_window(sink, "cf", 20, _rows(3))
    changelog.write_window(sink, "cf", 10, _rows(1))
    assert changelog.list_windows(sink, "cf") == [10, 20]
    assert changelog.read_window(sink, "cf", 20).num_rows == 3
    assert (tmp_path / "_cdcflow/changelog/changefeed=cf/window=00000000000000000020").is_dir()


def test_rewrite_replaces_whole_window_and_leaves_no_temp(tmp_path):
    sink = str(tmp_path)
    changelog.write_window(sink, "cf", 10, _rows(5))
    changelog.write_window(sink, "cf", 10, _rows(2))
    assert changelog.read_window(sink, "cf", 10).num_rows == 2
    assert not [p for p in (tmp_path / "_cdcflow/changelog/changefeed=cf").iterdir() if p.name.startswith(".tmp")]


def test_a_missing_window_is_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        changelog.read_window(str(tmp_path), "cf", 1)
