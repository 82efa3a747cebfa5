"""TiDB's topology keys in PD's etcd: what a registration writes, and which addresses a listing of them holds live."""

from __future__ import annotations

from cdc_core.codec import topology


def test_a_server_s_keys_sit_under_its_prefix() -> None:
    assert topology.info_key("10.0.0.1:4000") == "/topology/tidb/10.0.0.1:4000/info"
    assert topology.ttl_key("10.0.0.1:4000") == "/topology/tidb/10.0.0.1:4000/ttl"
    assert topology.info_key("a:1").startswith(topology.server_prefix("a:1"))


def test_only_an_address_with_both_keys_is_live_and_others_are_ignored() -> None:
    keys = [topology.info_key("b:4000"), topology.ttl_key("b:4000"), topology.info_key("gone:4000"),
            topology.ttl_key("a:4000"), topology.info_key("a:4000"), topology.ttl_key("ttl-only:4000"),
            "/topology/tiproxy/c:6000/info", "/topology/tiproxy/c:6000/ttl"]
    assert topology.live_addresses(keys) == ["a:4000", "b:4000"]
    assert topology.live_addresses([]) == []
