"""The embedded TiDB cluster on loopback: PD, TiKV stores and TiDB's SQL front, speaking their protocols.

One subpackage per part of the cluster, the imports going one way (``sql`` -> ``store`` -> ``pd``):

* ``pd`` - PD: the TSO, the region map as PD serves it, the member group, PD's gRPC service and HTTP API, the etcd
  it embeds, service GC safe points, the cluster's min resolved ts;
* ``store`` - TiKV: the MVCC store and its concurrency manager, the ChangeData (change feed) and KV services, split
  checks, GC passes and the stores' min resolved ts reports;
* ``sql`` - TiDB's SQL front: sessions, the MySQL protocol and its error codes, expressions, access paths,
  ``information_schema`` listings, sql_mode, transactions, table writing, ``IMPORT INTO``; and within it ``sql.ddl``,
  the DDL executor, ALTER rules, partition DDL and clauses, the catalog and the meta keys DDL writes.

The wiring stays here: ``cluster`` (the parts into gRPC and MySQL servers on one loop), ``embedded`` (a cluster on
a background thread), ``process`` (``cdcflow upstream start``), ``faults`` and ``admin_service`` (fault injection,
over the wire on the control port), ``workload`` (a sysbench-like OLTP mix against the SQL front).
"""
