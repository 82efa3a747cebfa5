"""PerRegistry: a class of metric families is made once per registry and kept apart from every other class's."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from cdc_core.metric_families import PerRegistry


class _A(PerRegistry):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.hits = Counter("test_family_hits", "Hits.", registry=registry)


class _B(PerRegistry):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.misses = Counter("test_family_misses", "Misses.", registry=registry)


def test_one_set_per_registry_and_class() -> None:
    one, two = CollectorRegistry(), CollectorRegistry()
    a = _A.for_registry(one)
    assert _A.for_registry(one) is a  # registering its families again would raise: the set is shared
    assert _A.for_registry(two) is not a and isinstance(_B.for_registry(one), _B)  # each class its own sets
    a.hits.inc()
    assert one.get_sample_value("test_family_hits_total") == 1.0
    assert two.get_sample_value("test_family_hits_total") == 0.0
