"""Issue 5's catalog load test at full size: 1,000,000 tables in one schema, 100 ListTables, 20 watches.

Not in the default suite: on this 2-core machine it takes ~2 minutes (creating the tables ~25 s, the
load ~35-100 s depending on what else runs). The same scenario runs with 100,000 tables in
``tests/upstream/test_catalog_limits.py``. Run with::

    .venv/bin/pytest -s -p no:cacheprovider tests/bench/test_catalog_load_bench.py
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

if "catalogload" not in sys.modules:
    _path = Path(__file__).parents[1] / "upstream" / "catalogload.py"
    _spec = importlib.util.spec_from_file_location("catalogload", _path)
    assert _spec is not None and _spec.loader is not None
    sys.modules["catalogload"] = _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)

from catalogload import MIB, run_catalog_load

# Growth of process RSS (server and clients in this one process) over the baseline with the tables created:
# the tracked part is at most the four pools (server and client, heap and direct: 4 x 100 MiB); gRPC's own
# copies of messages in flight are not covered by any permit. Measured: +515..570 MiB.
RSS_GROWTH_BOUND_1M = 800 * MIB


@pytest.mark.load
def test_catalog_load_1m_tables() -> None:
    res = run_catalog_load(1_000_000, n_lists=100, n_watches=20)
    print(res.summary())
    assert res.wrong == []
    assert res.lists_ok + len(res.lists_refused) == 100 and res.watches_ok + len(res.watches_refused) == 20
    for pool in ("heap", "direct"):
        assert 0 < res.server_peak[pool] <= res.limits[pool]
        assert res.server_sampled[pool] <= res.server_peak[pool]
        assert 0 < res.client_peak[pool] <= 100 * MIB
    assert res.peak_rss - res.baseline_rss <= RSS_GROWTH_BOUND_1M, res.summary()
