from deltalake import DeltaTable

from cdc_core.changefeed import dq_results


def test_append_writes_one_row_per_expectation(tmp_path):
    sink = f"file://{tmp_path}"
    reports = {
        "db.t": {"passed": False, "results": [
            {"expectation": "row_count_equals", "success": True, "observed": 3, "expected": 3},
            {"expectation": "checksum_equals", "success": False, "details": "differs",
             "sample_keys": [{"id": 7, "why": "differs"}]},
        ]},
        "db.u": {"passed": True, "results": []},
    }
    assert dq_results.append(sink, "cf", 42, "barrier 43", "checksum", reports) == 2
    assert dq_results.append(sink, "cf", 50, "window end", "checksum", {"db.t": reports["db.t"]}) == 2
    rows = DeltaTable(dq_results.results_path(sink)).to_pyarrow_table().to_pylist()
    assert len(rows) == 4
    bad = [r for r in rows if not r["success"]]
    assert {(r["ts"], r["table"], r["expectation"]) for r in bad} == {(42, "db.t", "checksum_equals"),
                                                                     (50, "db.t", "checksum_equals")}
    assert '"id": 7' in bad[0]["sample_keys"] and rows[0]["observed"] in ("3", None)


def test_mapped_values_are_recorded_per_table_and_column_as_passing_rows(tmp_path):
    sink = f"file://{tmp_path}"
    reports = dq_results.mapped_reports({"db.t": {"d": 3, "ts": 1}, "db.u": {"dt": 2}})
    assert dq_results.append(sink, "cf", 42, "snapshot", "off", reports) == 3
    rows = DeltaTable(dq_results.results_path(sink)).to_pyarrow_table().to_pylist()
    assert sorted((r["table"], r["expectation"], r["observed"], r["success"], r["mode"]) for r in rows) == [
        ("db.t", "values_mapped:d", "3", True, "off"), ("db.t", "values_mapped:ts", "1", True, "off"),
        ("db.u", "values_mapped:dt", "2", True, "off")]
    assert "3 value(s) of d Delta cannot hold (a zero or invalid date) written as NULL" in {r["details"] for r in rows}
