"""check_kvproto's comparison: what it reports when a definition differs from kvproto's (no kvproto needed)."""

from __future__ import annotations

import copy

import check_kvproto


def test_reports_a_changed_field_number_a_missing_field_and_a_missing_message() -> None:
    mine = check_kvproto.cdcflow_index()
    assert mine["cdcpb.Event.Row"]["generation"][0] == 10
    assert set(mine["cdcpb.ChangeData (service)"]) == {"EventFeed", "EventFeedV2"}
    real = copy.deepcopy(mine)
    assert check_kvproto.differences(mine, real) == []
    number, *rest = real["cdcpb.Error"]["congested"]
    real["cdcpb.Error"]["congested"] = (number + 1, *rest)
    del real["pdpb.ScanRegionsResponse"]["regions"]
    del real["errorpb.ServerIsBusy"]
    real["cdcpb.Event.Admin"] = {}  # kept opaque on purpose: never reported
    diffs = check_kvproto.differences(mine, real)
    assert diffs == [
        "cdcpb.Error.congested: cdcflow (8, 11, 'Congested', 1), kvproto (9, 11, 'Congested', 1)",
        "errorpb.ServerIsBusy: not in kvproto",
        "pdpb.ScanRegionsResponse.regions: not in kvproto",
    ]
