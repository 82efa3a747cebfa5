"""The cluster's min resolved ts as PD keeps it (``cdc_core/upstream/pd/min_resolved_ts.py``)."""

from __future__ import annotations

from cdc_core.upstream.pd.min_resolved_ts import MinResolvedTs


def test_the_cluster_value_is_the_minimum_over_the_stores_that_are_up() -> None:
    state = MinResolvedTs()
    state.report(1, 100)
    assert state.cluster([1, 2]) == 0  # store 2 has not reported: nothing is known to be resolved
    state.report(2, 90)
    state.report(1, 80)  # a late, older report does not lower store 1
    assert state.cluster([1, 2]) == 90 and state.cluster([1]) == 100
