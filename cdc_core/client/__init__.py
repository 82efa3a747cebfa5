"""Clients of the upstream cluster used by the CLI and the changefeed runner.

``upstream`` - the synchronous client: PD (and its etcd, where TiDB registers) over gRPC, SQL through
``tidb_sql`` (TiDB's MySQL protocol, PyMySQL), the catalog; ``pd_protocol`` / ``pd_addrs`` - PD's client rules,
shared with the puller; ``table_discovery`` - listing and watching tables under a client-side memory limiter
(asyncio, with a synchronous wrapper).
"""
