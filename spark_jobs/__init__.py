"""PySpark jobs of cdcflow, in the stages a window goes through: ``normalize`` (bronze events to each table's net
change), ``load`` (the net change into the silver Delta tables) and ``checks`` (the tables against the upstream and
their rules). A stage imports the stages before it (checks -> load -> normalize); the jobs at this level import the
stages, and nothing imports a job but the engine (``cdc_core.changefeed.spark_engine``, by name) and ``job_server``.

The jobs: ``apply_window`` (a window applied to the silver tables), ``ddl_apply`` (a DDL on Delta), ``snapshot_load``
(a table's initial load), ``rollback`` (a failed check's window undone), and in ``checks`` ``data_quality`` and
``window_checks``. Their plumbing: ``session`` (the shared SparkSession), ``job_io`` (arguments and results of a
job's process), ``job_server`` (the driver that runs a task's jobs in one application), ``upstream_read`` (the reads
of the upstream the snapshot, the checks and their read ahead share: chunk reads and point reads at changed keys).
(``tests/test_import_graph.py`` holds the stages to that order.)
"""
