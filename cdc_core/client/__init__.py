"""Clients of the upstream cluster used by the CLI and the changefeed runner.

``upstream`` - the synchronous PD/SQL/catalog client; ``table_discovery`` - listing and watching tables
under a client-side memory limiter (asyncio, with a synchronous wrapper).
"""
