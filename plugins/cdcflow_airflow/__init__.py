"""cdcflow's Airflow integration: the DAG factory (and later triggers, operators and the UI view).

Airflow puts its plugins folder on ``sys.path``, so this package imports as ``cdcflow_airflow``.
Airflow's plugin manager also imports every module here at start-up: keep module-level code cheap.
"""
