"""kvrpcpb and tikvpb on the wire: golden bytes written by hand from kvproto's field numbers and types
(pingcap/kvproto proto/kvrpcpb.proto ``GetRequest``, ``ScanRequest``, ``KvPair``, ``KeyError``, ``LockInfo``,
``Context``; errorpb.proto ``Error``; tikvpb.proto ``Tikv``), checked both ways: cdcflow's messages encode to them,
and they decode to the fields a TiKV or client-go peer means. ``scripts/check_kvproto.py`` compares the
definitions with a kvproto checkout."""

from __future__ import annotations

import pytest

from cdc_core.proto import errorpb_pb2, kvrpcpb_pb2, metapb_pb2, tikvpb_pb2

# region_id 1, region_epoch 2 {conf_ver 1, version 2}, peer 3 {id 1, store_id 2}, cluster_id 35 (tag 0x98 0x02).
CONTEXT = kvrpcpb_pb2.Context(region_id=2, region_epoch=metapb_pb2.RegionEpoch(conf_ver=1, version=3),
                              peer=metapb_pb2.Peer(id=4, store_id=5), cluster_id=7)
CONTEXT_BYTES = "08 02  12 04 08 01 10 03  1a 04 08 04 10 05  98 02 07"


def _both_ways(msg: object, golden: str) -> None:
    data = bytes.fromhex(golden.replace(" ", ""))
    assert msg.SerializeToString().hex(" ") == data.hex(" ")  # type: ignore[attr-defined]
    back = type(msg)()
    back.ParseFromString(data)  # type: ignore[attr-defined]
    assert back == msg


def test_get_request_and_context() -> None:
    _both_ways(CONTEXT, CONTEXT_BYTES)
    # context 1, key 2, version 3, need_commit_ts 4
    _both_ways(kvrpcpb_pb2.GetRequest(context=CONTEXT, key=b"k", version=9, need_commit_ts=True),
               f"0a 11 {CONTEXT_BYTES}  12 01 6b  18 09  20 01")
    # resolved_locks 13 and committed_locks 22, packed (tags 0x6a, 0xb2 0x01)
    _both_ways(kvrpcpb_pb2.Context(resolved_locks=[5, 6], committed_locks=[7]), "6a 02 05 06  b2 01 01 07")


@pytest.mark.parametrize(("msg", "golden"), [
    # value 3, commit_ts 7
    (kvrpcpb_pb2.GetResponse(value=b"v", commit_ts=6), "1a 01 76  38 06"),
    (kvrpcpb_pb2.GetResponse(not_found=True), "20 01"),  # not_found 4
    # error 2: KeyError.locked 1: LockInfo {primary_lock 1, lock_version 2, key 3, lock_ttl 4, txn_size 5,
    # lock_type 6 (Op.Del = 1)}
    (kvrpcpb_pb2.GetResponse(error=kvrpcpb_pb2.KeyError(locked=kvrpcpb_pb2.LockInfo(
        primary_lock=b"p", lock_version=5, key=b"k", lock_ttl=3000, txn_size=1, lock_type=kvrpcpb_pb2.Del))),
     "12 11 0a 0f  0a 01 70  10 05  1a 01 6b  20 b8 17  28 01  30 01"),
    # region_error 1: errorpb.Error.not_leader 2 {region_id 1, leader 2}
    (kvrpcpb_pb2.GetResponse(region_error=errorpb_pb2.Error(not_leader=errorpb_pb2.NotLeader(
        region_id=3, leader=metapb_pb2.Peer(id=4, store_id=5)))), "0a 0a 12 08 08 03 12 04 08 04 10 05"),
], ids=["value", "not_found", "locked", "not_leader"])
def test_get_responses(msg: kvrpcpb_pb2.GetResponse, golden: str) -> None:
    _both_ways(msg, golden)


def test_scan_and_batch_get() -> None:
    # start_key 2, limit 3, version 4, key_only 5, end_key 7, sample_step 8
    _both_ways(kvrpcpb_pb2.ScanRequest(start_key=b"a", limit=256, version=9, key_only=True, end_key=b"b",
                                       sample_step=2), "12 01 61  18 80 02  20 09  28 01  3a 01 62  40 02")
    # pairs 2: KvPair {key 2, value 3, commit_ts 4} and one carrying KeyError.abort 3 in its error 1
    _both_ways(kvrpcpb_pb2.ScanResponse(pairs=[
        kvrpcpb_pb2.KvPair(key=b"k", value=b"v", commit_ts=6),
        kvrpcpb_pb2.KvPair(error=kvrpcpb_pb2.KeyError(abort="x"))]),
        "12 08 12 01 6b 1a 01 76 20 06  12 05 0a 03 1a 01 78")
    _both_ways(kvrpcpb_pb2.ScanResponse(error=kvrpcpb_pb2.KeyError(retryable="r")), "1a 03 12 01 72")
    # keys 2 (repeated bytes), version 3; the response's error is field 5
    _both_ways(kvrpcpb_pb2.BatchGetRequest(keys=[b"a", b"b"], version=9), "12 01 61  12 01 62  18 09")
    _both_ways(kvrpcpb_pb2.BatchGetResponse(error=kvrpcpb_pb2.KeyError(abort="x")), "2a 03 1a 01 78")


@pytest.mark.parametrize(("error", "golden"), [
    (errorpb_pb2.Error(message="m"), "0a 01 6d"),
    (errorpb_pb2.Error(region_not_found=errorpb_pb2.RegionNotFound(region_id=3)), "1a 02 08 03"),
    # key_not_in_region 4 {key 1, region_id 2, start_key 3, end_key 4}
    (errorpb_pb2.Error(key_not_in_region=errorpb_pb2.KeyNotInRegion(key=b"k", region_id=3, start_key=b"a",
                                                                    end_key=b"z")),
     "22 0b 0a 01 6b 10 03 1a 01 61 22 01 7a"),
    (errorpb_pb2.Error(epoch_not_match=errorpb_pb2.EpochNotMatch(current_regions=[metapb_pb2.Region(id=3)])),
     "2a 04 0a 02 08 03"),
    (errorpb_pb2.Error(server_is_busy=errorpb_pb2.ServerIsBusy(reason="x", backoff_ms=5)), "32 05 0a 01 78 10 05"),
    (errorpb_pb2.Error(store_not_match=errorpb_pb2.StoreNotMatch(request_store_id=1, actual_store_id=2)),
     "42 04 08 01 10 02"),
    # mismatch_peer_id 20 (tag 0xa2 0x01)
    (errorpb_pb2.Error(mismatch_peer_id=errorpb_pb2.MismatchPeerId(request_peer_id=1, store_peer_id=2)),
     "a2 01 04 08 01 10 02"),
], ids=lambda v: next((f.name for f, _ in v.ListFields()), "") if isinstance(v, errorpb_pb2.Error) else "")
def test_region_errors(error: errorpb_pb2.Error, golden: str) -> None:
    _both_ways(error, golden)


def test_enums_and_service() -> None:
    assert (kvrpcpb_pb2.Put, kvrpcpb_pb2.Del, kvrpcpb_pb2.Lock, kvrpcpb_pb2.Rollback) == (0, 1, 2, 3)
    assert (kvrpcpb_pb2.SI, kvrpcpb_pb2.RC, kvrpcpb_pb2.RCCheckTS) == (0, 1, 2)
    svc = tikvpb_pb2.DESCRIPTOR.services_by_name["Tikv"]
    assert svc.full_name == "tikvpb.Tikv"
    for name, req, resp in (("KvGet", "GetRequest", "GetResponse"), ("KvScan", "ScanRequest", "ScanResponse"),
                            ("KvBatchGet", "BatchGetRequest", "BatchGetResponse")):
        m = svc.methods_by_name[name]
        assert (m.input_type.full_name, m.output_type.full_name) == (f"kvrpcpb.{req}", f"kvrpcpb.{resp}")
        assert not m.client_streaming and not m.server_streaming
    assert kvrpcpb_pb2.GetResponse.DESCRIPTOR.fields_by_name["region_error"].message_type.full_name == \
        "errorpb.Error"
