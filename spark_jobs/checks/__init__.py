"""Checks: the silver tables compared with the upstream and with their own rules, at a barrier or a window's end.

- ``data_quality``: a whole table's checks with Great Expectations (a job);
- ``window_checks``: one window's checks, costing what the window changed (a job);
- ``check_read_ahead``: the upstream side of a window's checks, read while the window applies;
- ``chunk_checksum``: the full reconciliation's chunked checksums, computed where the rows are;
- ``structural_checks``: the structural expectations of many tables in one Great Expectations run.
"""
