"""Table schemas: the table-info model (``model``; ``partition``: partitioned tables' partitions), TiDB's DDL job
tables and job JSON (``ddl_history``, ``tidb_json``), and schema storage."""
