"""Scale: one table span of 500,000 regions is created in one batch split and served by ScanRegions in
batches of 1024 (contiguous, every region once, leaders balanced over the stores). ~12 s here; figures
(regions/s, memory, events/s) come from ``tests/bench/test_upstream_scale_bench.py``."""

from __future__ import annotations

import itertools
import os
import time

import pytest
from wire.pd import PdWire

from cdc_core.codec import key as keycodec
from cdc_core.codec.memcomparable import encode_key
from cdc_core.proto import pdpb_pb2
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from cdc_core.upstream.pd.regions import RegionManager

REGIONS = int(os.environ.get("CDCFLOW_SCALE_REGIONS", "500000"))


def scan_all(pd_addr: str, start: bytes, end: bytes) -> tuple[list[pdpb_pb2.Region], int]:
    """Every region of raw ``[start, end)`` from PD's ScanRegions (boundaries memcomparable-encoded both ways)."""
    out: list[pdpb_pb2.Region] = []
    calls = 0
    key, end = encode_key(start), encode_key(end)
    with PdWire(pd_addr) as pd:
        while True:
            resp = pd.scan_regions(key, end)
            calls += 1
            assert len(resp.regions) <= 1024
            out.extend(resp.regions)
            last = resp.regions[-1].region.end_key
            if not last or last >= end:
                return out, calls
            key = last


@pytest.mark.load
def test_one_table_span_of_500k_regions_is_creatable_and_servable() -> None:
    with EmbeddedCluster(ClusterConfig(stores=3)) as ec:
        tid = 4242
        start, end = keycodec.table_span(tid)
        keys = [start, *(keycodec.row_key(tid, h) for h in range(1, REGIONS)), end]
        t0 = time.perf_counter()
        ec.call(lambda: ec.cluster.regions.split(keys), timeout=300)  # type: ignore[union-attr]
        created_s = time.perf_counter() - t0
        regions, calls = scan_all(ec.pd_addr, start, end)
        assert len(regions) == REGIONS and calls == -(-REGIONS // 1024)
        assert regions[0].region.start_key == encode_key(start) and regions[-1].region.end_key == encode_key(end)
        for a, b in itertools.pairwise(regions[:2000]):
            assert a.region.end_key == b.region.start_key
        assert len({r.region.id for r in regions}) == REGIONS
        counts = ec.call(lambda: ec.cluster.regions.leader_counts())  # type: ignore[union-attr]
        assert max(counts.values()) - min(counts.values()) <= 1
        print(f"{REGIONS} regions created in {created_s:.2f}s ({REGIONS / created_s:,.0f}/s)")


def test_region_operations_are_logarithmic_on_50k_regions() -> None:
    """locate / split / merge / scan on a 50,000-region map take microseconds, not a walk over the map."""
    m = RegionManager([1, 2, 3])
    keys = [keycodec.row_key(7, h) for h in range(0, 100_000, 2)]
    m.split(keys)
    assert len(m) == 50_001
    t0 = time.perf_counter()
    for h in range(1, 2001, 2):
        r = m.locate(keycodec.row_key(7, h * 40))
        m.split([keycodec.row_key(7, h * 40 + 1)])
        m.merge(m.locate(keycodec.row_key(7, h * 40 + 1)).id, r.id)
        assert len(m.scan(r.start_key, b"", 1024)) == 1024
    per_op = (time.perf_counter() - t0) / 1000
    assert len(m) == 50_001
    assert per_op < 0.005, f"{per_op * 1e6:.0f} us per locate+split+merge+scan(1024)"
