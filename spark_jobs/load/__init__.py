"""Load: the net change written into the silver Delta tables, exactly once per window, and read back.

- ``delta_writer``: the MERGE of a window's net change, by delta-rs or delta-spark, with the app transaction;
- ``merge_on_read``: the delta-rs writer's MERGE as deletion vectors;
- ``deletion_vector``: Delta's deletion-vector descriptor, bitmap format and files;
- ``delta_log``: a local table's log read and committed where delta-rs's API stops short;
- ``silver_read``: a silver table's live rows, with or without deletion vectors;
- ``table_moves``: where a table went when a DDL moved it (dropped copies, move records);
- ``partition_rows``: the rows of dropped or truncated partitions removed by the partitioning rule.
"""
