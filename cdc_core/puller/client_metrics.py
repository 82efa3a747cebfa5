"""The subscription client's own metric families, one set per Prometheus registry (the blocks it is built of --
the event stream, the range locks, the advancers -- export the rest)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from cdc_core.metric_families import PerRegistry


class ClientMetrics(PerRegistry):
    """The client's own metric families (the blocks export the rest), one set per registry."""

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
