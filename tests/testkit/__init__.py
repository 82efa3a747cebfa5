"""The helpers the tests share, one module each: an importable package (pyproject's pytest ``pythonpath`` puts
``tests/`` on ``sys.path``), so that a test imports them by name instead of loading files through ``sys.modules``.

- ``e2e``: Delta against the upstream's rows, the CLI in-process, the artifacts folder;
- ``puller``: the subscription-client tests' recorder, MVCC ground truth and waits; ``mock_store``: a store's
  ``ChangeData`` service in the test's process, for the puller's workers and scheduler;
- ``builders``: the Spark jobs' tests' table infos and bronze event builder;
- ``small_lake``: small Delta tables stamped with cdcflow ts, for the tests of their upkeep;
- ``random_workload``: the differential tests' seeded workload;
- ``airflow_import``: Airflow imported with a temporary ``AIRFLOW_HOME``;
- ``airflow_server``, ``airflow_feed``: a real Airflow and a changefeed driven through it;
- ``topology``: the distributed deployment as processes (what docker-compose.yml runs); ``chaos``: the soak's faults;
- ``listing_load``: issue 5's table-listing load scenario;
- ``suite_schedule``: the pytest plugin that spreads ``make test`` over its two workers;
- ``import_graph``: the project's import graph and its circles (``tests/test_import_graph.py``).
- ``sysbench``: Debian's stock sysbench against the MySQL front, and a changefeed running beside it;
- ``sql_engine``: statements on an embedded cluster's SQL engine, their rows and their MySQL errors.
"""
