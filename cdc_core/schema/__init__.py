"""Table schemas: the table-info model (``model``; ``partition``: partitioned tables' partitions), the DDL job
(``ddl_job``), TiDB's job and table JSON (``tidb_json``) and DDL job tables (``ddl_history``), and schema storage."""
