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
