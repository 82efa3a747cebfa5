"""EventFeed fixtures over the wire-level client (``tests/wire/eventfeed.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from wire.eventfeed import FeedClient


@pytest.fixture
def feed(store_addr: str, pd_addr: str) -> Iterator[FeedClient]:
    fc = FeedClient(store_addr, pd_addr=pd_addr)
    yield fc
    fc.close()


@pytest.fixture
def feed_factory(store_addr: str, pd_addr: str) -> Iterator[type]:
    made: list[FeedClient] = []

    def make() -> FeedClient:
        fc = FeedClient(store_addr, pd_addr=pd_addr)
        made.append(fc)
        return fc

    yield make  # type: ignore[misc]
    for fc in made:
        fc.close()
