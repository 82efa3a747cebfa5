from __future__ import annotations

import itertools

from cdc_core.codec import key as keycodec
from cdc_core.upstream.pd.regions import Region, RegionManager, table_split_keys


def assert_contiguous(regions: list[Region]) -> None:
    assert regions[0].start_key == b"" and regions[-1].end_key == b""
    for a, b in itertools.pairwise(regions):
        assert a.end_key == b.start_key and a.start_key < a.end_key


def test_starts_with_one_region_covering_everything() -> None:
    m = RegionManager([1])
    [r] = m.all()
    assert (r.start_key, r.end_key) == (b"", b"")
    assert r.leader is not None and r.leader.store_id == 1
    assert m.locate(b"anything") == r


def test_table_split_keys_even_handle_space() -> None:
    start, end = keycodec.table_span(100)
    assert table_split_keys(100, 1) == [start, end]
    assert table_split_keys(100, 2) == [start, keycodec.row_key(100, 0), end]
    four = table_split_keys(100, 4)
    assert four[1:4] == [keycodec.row_key(100, h) for h in (-(1 << 62), 0, 1 << 62)]


def test_split_keeps_coverage_and_bumps_epochs() -> None:
    m = RegionManager([1])
    seen: list[tuple[int, list[int]]] = []
    m.add_split_observer(lambda old, parts: seen.append((old.id, [p.id for p in parts])))
    first = m.all()[0]
    covering = m.split(table_split_keys(100, 2))
    regions = m.all()
    assert_contiguous(regions)
    assert len(regions) == 4
    start, end = keycodec.table_span(100)
    assert [(r.start_key, r.end_key) for r in covering] == [(start, keycodec.row_key(100, 0)),
                                                            (keycodec.row_key(100, 0), end)]
    assert regions[0].id == first.id and regions[0].version > first.version
    assert seen == [(first.id, [r.id for r in regions])]  # one batch split of the one region
    assert m.locate(keycodec.row_key(100, -5)).end_key == keycodec.row_key(100, 0)
    assert m.locate(keycodec.row_key(100, 5)).start_key == keycodec.row_key(100, 0)
    # splitting at an existing boundary is a no-op
    before = [(r.id, r.version) for r in m.all()]
    m.split([start])
    assert [(r.id, r.version) for r in m.all()] == before


def test_scan_limits_and_overlap() -> None:
    m = RegionManager([1])
    m.split([b"b", b"d", b"f"])
    assert [r.start_key for r in m.scan(b"c", b"e")] == [b"b", b"d"]
    assert [r.start_key for r in m.scan(b"", b"", limit=2)] == [b"", b"b"]
    assert [r.start_key for r in m.scan(b"f", b"")] == [b"f"]
    assert m.get(m.all()[1].id) == m.all()[1]
