"""Clients of the upstream cluster used by the CLI and the changefeed runner (synchronous)."""
