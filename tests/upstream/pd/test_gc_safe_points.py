"""PD's service GC safe points (``cdc_core/upstream/pd/gc_safe_points.py``): the minimum of the live ones, a TTL
of 0 removing one, an expired one no longer counting; over the wire: ``tests/upstream/pd/test_pd_service.py``."""

from __future__ import annotations

from cdc_core.upstream.pd.gc_safe_points import GcSafePoints


def test_gc_safe_points() -> None:
    now = [0.0]
    gc = GcSafePoints(clock=lambda: now[0])
    assert gc.update("cdc-a", 10, 100) == 100
    assert gc.update("cdc-b", 10, 200) == 100
    assert gc.update("cdc-a", 0, 0) == 200  # ttl 0 removes
    now[0] = 11.0
    assert gc.min_safe_point() == 0  # expired


def test_a_new_service_cannot_set_a_point_below_the_minimum_and_a_known_one_may_move_back() -> None:
    now = [0.0]
    gc = GcSafePoints(clock=lambda: now[0])
    assert gc.update("cdc-a", 10, 100) == 100
    assert gc.update("br", 10, 50) == 100  # GC may already have passed 50: refused, as PD refuses it
    assert gc.live() == {"cdc-a": 100}
    assert gc.update("cdc-a", 10, 80) == 80  # its own point, either way
