"""EventFeed fixtures. The helpers live in ``feedlib.py`` next to this file.

The suite runs with ``--import-mode=importlib`` (no ``sys.path`` insertion), so this conftest,
which pytest loads before the test modules of this directory, registers ``feedlib`` as a module
that the tests import by name.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

if "feedlib" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("feedlib", Path(__file__).with_name("feedlib.py"))
    assert _spec is not None and _spec.loader is not None
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["feedlib"] = _mod
    _spec.loader.exec_module(_mod)

from feedlib import FeedClient


@pytest.fixture
def feed(store_addr: str) -> Iterator[FeedClient]:
    fc = FeedClient(store_addr)
    yield fc
    fc.close()


@pytest.fixture
def feed_factory(store_addr: str) -> Iterator[type]:
    made: list[FeedClient] = []

    def make() -> FeedClient:
        fc = FeedClient(store_addr)
        made.append(fc)
        return fc

    yield make  # type: ignore[misc]
    for fc in made:
        fc.close()
