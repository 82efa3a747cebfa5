"""Helpers for subscription-client tests: a recorder that checks the puller's promises as events arrive,
the upstream's MVCC history of a span (the ground truth), condition waits for asyncio tests, a test table and
a client pulling one span (``pulling``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from cdc_core.codec import key as keycodec
from cdc_core.errors import ChangefeedError
from cdc_core.puller.backoff import Backoff
from cdc_core.puller.matcher import RowChange
from cdc_core.puller.subscription_client import SubscriptionClient

Change = tuple[bytes, int, str]  # (key, commit_ts, op): what downstream dedup keys on


@dataclass
class Recorder:
    """Collects changes and resolved ts per span, and records every broken promise."""

    changes: dict[int, list[RowChange]] = field(default_factory=dict)
    resolved: dict[int, list[int]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def on_change(self, span_id: int, ch: RowChange) -> None:
        emitted = self.resolved.get(span_id)
        if emitted and ch.commit_ts <= emitted[-1]:
            self.violations.append(
                f"span {span_id}: change at commit ts {ch.commit_ts} after resolved ts {emitted[-1]} was emitted"
            )
        self.changes.setdefault(span_id, []).append(ch)

    def on_resolved(self, span_id: int, ts: int) -> None:
        emitted = self.resolved.setdefault(span_id, [])
        if emitted and ts <= emitted[-1]:
            self.violations.append(f"span {span_id}: resolved ts went from {emitted[-1]} to {ts}")
        emitted.append(ts)

    def keys(self, span_id: int) -> list[Change]:
        return [(c.key, c.commit_ts, c.op) for c in self.changes.get(span_id, [])]

    def last_resolved(self, span_id: int) -> int:
        r = self.resolved.get(span_id)
        return r[-1] if r else 0


def mvcc_history(ec: Any, start: bytes, end: bytes, after_ts: int, upto_ts: int) -> list[Change]:
    """Every committed change of ``[start, end)`` with ``after_ts < commit_ts <= upto_ts``, from the upstream."""

    def read() -> list[Change]:
        assert ec.cluster is not None
        records, _ = ec.cluster.store.versions_after(start, end, after_ts)
        return [(r.key, r.commit_ts, "put" if r.op == 1 else "delete") for r in records if r.commit_ts <= upto_ts]

    return ec.call(read)  # type: ignore[no-any-return]


def assert_exactly_once_after_dedup(got: list[Change], expected: list[Change], upto_ts: int) -> int:
    """Every expected change arrived, nothing else did (up to ``upto_ts``); returns the duplicates removed."""
    within = [c for c in got if c[1] <= upto_ts]
    deduped = set(within)
    missing = set(expected) - deduped
    extra = deduped - set(expected)
    assert not missing, f"{len(missing)} committed changes never arrived, e.g. {sorted(missing)[:3]}"
    assert not extra, f"{len(extra)} changes arrived that the upstream never committed, e.g. {sorted(extra)[:3]}"
    assert len(deduped) == len(expected)
    return len(within) - len(deduped)


def counter(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def until(cond: Callable[[], Any], timeout: float = 20.0, what: str = "condition", check: Any = None) -> Any:
    """Poll ``cond`` on the loop until it holds (``check()`` raises a client failure early)."""
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def until_failed(client: SubscriptionClient, pattern: str, timeout: float = 20.0) -> None:
    """Wait for the client to fail with a ChangefeedError matching ``pattern``."""

    def failed() -> bool:
        try:
            client.check()
        except ChangefeedError:
            return True
        return False

    await until(failed, timeout, "the client to fail")
    with pytest.raises(ChangefeedError, match=pattern):
        client.check()


ERRORS = "cdcflow_puller_region_errors_total"
SPAN = 1  # the span id `pulling` subscribes


def make_table(client: Any, ec: Any, db: str, name: str = "t", *, create_db: bool = False
               ) -> tuple[int, tuple[bytes, bytes]]:
    """Create ``db.name (a INT PRIMARY KEY, b INT)``; its table id and row span."""
    client.execute(f"{f'CREATE DATABASE {db}; ' if create_db else ''}USE {db}; "
                   f"CREATE TABLE {name} (a INT PRIMARY KEY, b INT)")
    tid = ec.faults.table_id(db, name)
    return tid, keycodec.table_span(tid)


@asynccontextmanager
async def pulling(
    pd_addr: str, span: tuple[bytes, bytes], start_ts: int, **kw: Any
) -> AsyncIterator[tuple[SubscriptionClient, Recorder, CollectorRegistry]]:
    """A client pulling ``span`` as span ``SPAN`` into a Recorder; on exit, no failure and no promise broken."""
    rec = Recorder()
    reg = CollectorRegistry()
    kw.setdefault("backoff", Backoff(base_ms=20, max_ms=500))
    client = SubscriptionClient(pd_addr, rec.on_change, on_resolved=rec.on_resolved, registry=reg, **kw)
    try:
        await client.subscribe(SPAN, span[0], span[1], start_ts)
        yield client, rec, reg
        client.check()
        assert not rec.violations, rec.violations[:5]
    finally:
        await client.close()
