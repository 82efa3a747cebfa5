"""Which tables and events a changefeed replicates (TiDB table-filter syntax, event filters)."""
