"""The embedded TiKV/PD/TiDB-like upstream cluster on loopback.

One concept per module:

* ``tso`` - the timestamp oracle; ``mvcc`` - the multi-version key-value store with 2PC and locks;
* ``regions`` - the region map (contiguous key ranges, epochs, leaders; split / merge / transfer);
* ``split_checker`` - automatic split of regions past a key-count or size limit;
* ``gc`` - service GC safe points, the cluster safe point and the GC worker;
* ``catalog`` - databases, tables, ids and schema versions; ``ddl`` - DDL jobs and their history rows
  (``partition_ddl``: EXCHANGE / REORGANIZE PARTITION, PARTITION BY, REMOVE PARTITIONING, which change the key
  ranges that hold a table's rows);
* ``txn`` - optimistic transactions over ``mvcc``; ``expr`` - SQL expression evaluation;
* ``sql_front`` - parsing and executing SQL scripts in a session (``partition_clause``: ``PARTITION BY`` of
  CREATE TABLE, read apart); ``table_writer`` - rows and their keys; ``mysql_front`` - the SQL front over the
  MySQL protocol (``mysql_errors``: MySQL's error codes; ``info_schema``: ``information_schema``;
  ``table_listing``: listings of ``information_schema.TABLES`` streamed under the ``upstream-catalog`` limiter);
* ``pd_service`` / ``etcd_service`` (PD's embedded etcd: TiDB's topology keys) / ``cdc_service`` /
  ``admin_service`` - the gRPC services;
* ``faults`` - fault injection (region operations, store outages, held locks, busy stores, GC passes);
* ``workload`` - a sysbench-like OLTP mix against the SQL front;
* ``cluster`` - wires the above into servers (PD + N stores); ``embedded`` - a cluster on a background thread;
  ``process`` - the ``cdcflow upstream start`` process (foreground, detached, upstream.json).
"""
