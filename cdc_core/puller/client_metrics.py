"""The subscription client's own metric families, one set per Prometheus registry (the blocks it is built of --
the event stream, the range locks, the advancers -- export the rest)."""

from __future__ import annotations

import weakref

from prometheus_client import REGISTRY, CollectorRegistry, Counter


class ClientMetrics:
    """The client's own metric families (the blocks export the rest), one set per registry."""

    _by_registry: weakref.WeakKeyDictionary[CollectorRegistry, ClientMetrics] = weakref.WeakKeyDictionary()

    def __init__(self, registry: CollectorRegistry) -> None:
        self.errors = Counter(
            "cdcflow_puller_region_errors", "Region requests ended, by error kind.", ("kind",), registry=registry
        )
        self.events = Counter(
            "cdcflow_puller_events_received",
            "EventFeed events received: entries, rows, resolved (messages), resolved_regions (regions in them), "
            "error, stale (of an ended request).",
            ("kind",),
            registry=registry,
        )
        self.changes = Counter("cdcflow_puller_changes_emitted", "Row changes handed on.", registry=registry)
        self.requests = Counter("cdcflow_puller_region_requests", "Region requests sent.", registry=registry)

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> ClientMetrics:
        reg = REGISTRY if registry is None else registry
        m = cls._by_registry.get(reg)
        if m is None:
            m = cls._by_registry[reg] = cls(reg)
        return m

