"""cdcpb on the wire: golden bytes written by hand from kvproto's field numbers and types
(pingcap/kvproto proto/cdcpb.proto, errorpb.proto, kvrpcpb.proto, metapb.proto), checked both ways: cdcflow's
messages encode to them, and they decode to the fields a TiKV/TiCDC peer means."""

from __future__ import annotations

import pytest

from cdc_core.proto import cdcpb_pb2, errorpb_pb2, kvrpcpb_pb2, metapb_pb2

Req = cdcpb_pb2.ChangeDataRequest
Row = cdcpb_pb2.Event.Row


def _both_ways(msg: object, golden: str) -> None:
    data = bytes.fromhex(golden.replace(" ", ""))
    assert msg.SerializeToString().hex(" ") == data.hex(" ")  # type: ignore[attr-defined]
    back = type(msg)()
    back.ParseFromString(data)  # type: ignore[attr-defined]
    assert back == msg


def test_register_request() -> None:
    msg = Req(
        header=cdcpb_pb2.Header(cluster_id=7, ticdc_version="8.5.0"),  # 1 {1, 2}
        region_id=2,  # 2
        region_epoch=metapb_pb2.RegionEpoch(conf_ver=1, version=3),  # 3 {conf_ver 1, version 2}
        checkpoint_ts=5, start_key=b"\x01", end_key=b"\x02", request_id=9,  # 4, 5, 6, 7
        extra_op=kvrpcpb_pb2.ReadOldValue,  # 8 (kvrpcpb.ExtraOp)
        register=Req.Register(),  # 9, an empty message
        filter_loop=True,  # 12
        scan_priority=cdcpb_pb2.SCAN_PRIORITY_HIGH,  # 14
    )
    _both_ways(msg, "0a 09 08 07 12 05 38 2e 35 2e 30  10 02  1a 04 08 01 10 03  20 05  2a 01 01  32 01 02  38 09"
                    "  40 01  4a 00  60 01  70 02")


def test_deregister_notify_and_kv_api() -> None:
    _both_ways(Req(region_id=2, request_id=9, deregister=Req.Deregister()), "10 02 38 09 6a 00")
    _both_ways(Req(kv_api=Req.RawKV, notify_txn_status=Req.NotifyTxnStatus(
        txn_status=[cdcpb_pb2.TxnStatus(start_ts=1, min_commit_ts=2, commit_ts=3, is_rolled_back=True)])),
        "52 0a 0a 08 08 01 10 02 18 03 20 01  58 01")


def test_entries_event() -> None:
    row = Row(start_ts=1, commit_ts=2, type=cdcpb_pb2.Event.COMMITTED, op_type=Row.PUT, key=b"k", value=b"v",
              old_value=b"o", generation=6, txn_source=0)
    msg = cdcpb_pb2.ChangeDataEvent(events=[cdcpb_pb2.Event(
        region_id=3, index=4, request_id=9, entries=cdcpb_pb2.Event.Entries(entries=[row]))])
    # Row: start_ts 1, commit_ts 2, type 3, op_type 4, key 5, value 6, old_value 7, generation 10.
    _both_ways(msg, "0a 1d  08 03  10 04  1a 15 0a 13 08 01 10 02 18 04 20 01 2a 01 6b 32 01 76 3a 01 6f 50 06"
                    "  38 09")


def test_resolved_ts_batched_and_per_region() -> None:
    _both_ways(cdcpb_pb2.ChangeDataEvent(resolved_ts=cdcpb_pb2.ResolvedTs(regions=[3, 4], ts=100, request_id=9)),
               "12 08 0a 02 03 04 10 64 18 09")  # regions packed
    # Event.resolved_ts (6), what a store sends a client it takes for one older than 4.0.8.
    _both_ways(cdcpb_pb2.Event(region_id=3, request_id=9, resolved_ts=100), "08 03 30 64 38 09")


def test_long_txn_and_admin_events() -> None:
    _both_ways(cdcpb_pb2.Event(region_id=3, long_txn=cdcpb_pb2.Event.LongTxn(
        txn_info=[cdcpb_pb2.TxnInfo(start_ts=1, primary=b"p")])), "08 03 42 07 0a 05 08 01 12 01 70")
    # raft_cmdpb.AdminRequest kept opaque: a length-delimited field 1 inside field 4.
    _both_ways(cdcpb_pb2.Event(region_id=3, admin=cdcpb_pb2.Event.Admin(admin_request=b"\x08\x01")),
               "08 03 22 04 0a 02 08 01")


@pytest.mark.parametrize(("error", "golden"), [
    (cdcpb_pb2.Error(not_leader=errorpb_pb2.NotLeader(region_id=3, leader=metapb_pb2.Peer(id=4, store_id=5))),
     "0a 08 08 03 12 04 08 04 10 05"),
    (cdcpb_pb2.Error(region_not_found=errorpb_pb2.RegionNotFound(region_id=3)), "12 02 08 03"),
    (cdcpb_pb2.Error(epoch_not_match=errorpb_pb2.EpochNotMatch(current_regions=[metapb_pb2.Region(id=3)])),
     "1a 04 0a 02 08 03"),
    (cdcpb_pb2.Error(duplicate_request=cdcpb_pb2.DuplicateRequest(region_id=3)), "22 02 08 03"),
    (cdcpb_pb2.Error(compatibility=cdcpb_pb2.Compatibility(required_version="6.2.0")),
     "2a 07 0a 05 36 2e 32 2e 30"),
    (cdcpb_pb2.Error(cluster_id_mismatch=cdcpb_pb2.ClusterIDMismatch(current=1, request=2)), "32 04 08 01 10 02"),
    (cdcpb_pb2.Error(server_is_busy=errorpb_pb2.ServerIsBusy(reason="x", backoff_ms=5, estimated_wait_ms=6,
                                                             applied_index=7)), "3a 09 0a 01 78 10 05 18 06 20 07"),
    (cdcpb_pb2.Error(congested=cdcpb_pb2.Congested(region_id=3)), "42 02 08 03"),
], ids=lambda v: v.ListFields()[0][0].name if isinstance(v, cdcpb_pb2.Error) else "")
def test_errors(error: cdcpb_pb2.Error, golden: str) -> None:
    _both_ways(error, golden)
    # In an event: region_id 1, error 5, request_id 7.
    data = bytes.fromhex(golden.replace(" ", ""))
    _both_ways(cdcpb_pb2.Event(region_id=3, request_id=9, error=error),
               f"08 03 2a {len(data):02x} {data.hex(' ')} 38 09")


def test_enum_values() -> None:
    assert [cdcpb_pb2.Event.PREWRITE, cdcpb_pb2.Event.COMMIT, cdcpb_pb2.Event.ROLLBACK, cdcpb_pb2.Event.COMMITTED,
            cdcpb_pb2.Event.INITIALIZED] == [1, 2, 3, 4, 5]
    assert (Row.PUT, Row.DELETE) == (1, 2)
    assert (kvrpcpb_pb2.Noop, kvrpcpb_pb2.ReadOldValue) == (0, 1)
    assert (Req.TiDB, Req.RawKV, Req.TxnKV) == (0, 1, 2)


def test_service_methods() -> None:
    svc = cdcpb_pb2.DESCRIPTOR.services_by_name["ChangeData"]
    assert svc.full_name == "cdcpb.ChangeData"
    for name in ("EventFeed", "EventFeedV2"):
        m = svc.methods_by_name[name]
        assert (m.input_type.full_name, m.output_type.full_name) == ("cdcpb.ChangeDataRequest", "cdcpb.ChangeDataEvent")
    assert cdcpb_pb2.Error.DESCRIPTOR.fields_by_name["not_leader"].message_type.full_name == "errorpb.NotLeader"
    assert Req.DESCRIPTOR.fields_by_name["extra_op"].enum_type.full_name == "kvrpcpb.ExtraOp"
