"""TiDB's DDL: the executor that turns DDL statements into jobs and catalog changes (``executor``), the ALTER TABLE
rules (``ddl_alter``), column definitions (``column_def``), the ``PARTITION BY`` clause (``partition_clause``) and
the partition DDL that moves rows between key ranges (``partition_ddl``), the catalog (``catalog``) and the meta keys
each job writes in its transaction (``schema_meta``)."""
