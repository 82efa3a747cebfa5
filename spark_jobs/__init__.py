"""PySpark jobs of cdcflow: apply a bronze window to the silver Delta tables, data-quality checks.

Modules: ``session`` (the shared SparkSession), ``bronze`` (changelog layout and readers),
``mount`` (decode row values by column id), ``net_effect`` (dedupe, update split, order, net
effect), ``delta_writer`` (exactly-once MERGE with a Delta app transaction), ``apply_window`` (the
job), ``data_quality`` (GX checks and checksums).
"""
