"""The committed generated modules must equal what `make proto` produces from the .proto files."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_modules_are_not_stale(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "scripts/gen_proto.py"), "--out", str(tmp_path)], check=True)
    fresh = sorted((tmp_path / "cdc_core/proto").glob("*_pb2*"))
    committed = sorted((ROOT / "cdc_core/proto").glob("*_pb2*"))
    assert [p.name for p in fresh] == [p.name for p in committed], "generated file set differs: run `make proto`"
    stale = [p.name for p, q in zip(fresh, committed, strict=True) if p.read_bytes() != q.read_bytes()]
    assert not stale, f"stale generated modules (run `make proto`): {stale}"


def test_field_numbers_follow_the_contract():
    from cdc_core.proto import cdcpb_pb2

    req = cdcpb_pb2.ChangeDataRequest.DESCRIPTOR.fields_by_name
    assert {n: req[n].number for n in ("header", "region_id", "region_epoch", "checkpoint_ts", "start_key",
                                       "end_key", "request_id", "extra_op", "register", "deregister")} == {
        "header": 1, "region_id": 2, "region_epoch": 3, "checkpoint_ts": 4, "start_key": 5, "end_key": 6,
        "request_id": 7, "extra_op": 8, "register": 9, "deregister": 13}
    row = cdcpb_pb2.Event.Row.DESCRIPTOR.fields_by_name
    assert [row[n].number for n in ("start_ts", "commit_ts", "type", "op_type", "key", "value", "old_value")] == [
        1, 2, 3, 4, 5, 6, 7]
    err = cdcpb_pb2.Error.DESCRIPTOR.fields_by_name
    assert [err[n].number for n in ("not_leader", "region_not_found", "epoch_not_match", "duplicate_request",
                                    "server_is_busy")] == [1, 2, 3, 4, 7]
    rts = cdcpb_pb2.ResolvedTs.DESCRIPTOR.fields_by_name
    assert [rts[n].number for n in ("regions", "ts", "request_id")] == [1, 2, 3]
    ev = cdcpb_pb2.ChangeDataEvent.DESCRIPTOR.fields_by_name
    assert (ev["events"].number, ev["resolved_ts"].number) == (1, 2)
    e = cdcpb_pb2.Event.DESCRIPTOR.fields_by_name
    assert [e[n].number for n in ("region_id", "request_id", "entries", "admin", "error")] == [1, 7, 3, 4, 5]
    assert cdcpb_pb2.ReadOldValue == 1
    LT = cdcpb_pb2.Event.LogType
    assert [LT.PREWRITE, LT.COMMIT, LT.ROLLBACK, LT.COMMITTED, LT.INITIALIZED] == [1, 2, 3, 4, 5]
