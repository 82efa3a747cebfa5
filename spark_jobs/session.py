"""The one shared SparkSession of a process (embedded ``local[2]`` by default).

Sessions this process creates carry delta-spark's jars (``jars.lock``, :mod:`cdc_core.changefeed.delta_jars`) with
Delta's SQL extension and catalog. ``CDCFLOW_SPARK_MASTER`` points it at a cluster (``spark://host:7077``) or
Spark Connect (``sc://host:15002``). Under ``spark-submit`` the master and extra confs come from the submit
command; ``getOrCreate`` then returns the session spark-submit made and only session-level confs set here
apply.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"
MASTER_ENV = "CDCFLOW_SPARK_MASTER"
SHUFFLE_PARTITIONS = "4"

# Session confs: UTC so TIMESTAMP_NTZ <-> string is never zone-shifted, Arrow for toArrow /
# createDataFrame(pa.Table), few shuffle partitions because windows are small.
_CONFS: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": SHUFFLE_PARTITIONS,
    "spark.default.parallelism": SHUFFLE_PARTITIONS,
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.sql.adaptive.enabled": "true",
    # delta-spark replays a table's log with a Spark job of this many partitions (default 50: a three-row MERGE
    # then takes 4.9 s instead of 2.2 s on 2 cores; test_bench_small_window_per_writer in tests/bench).
    "spark.databricks.delta.snapshotPartitions": "2",
}
# Static confs (only effective when this process creates the JVM session).
_STATIC_CONFS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": os.environ.get("CDCFLOW_SPARK_DRIVER_MEMORY", "1g"),
    "spark.sql.warehouse.dir": os.path.join(os.environ.get("CDCFLOW_HOME", ".cdcflow"), "spark-warehouse"),
}

_lock = threading.Lock()


def get_spark(app_name: str = "cdcflow", *, master: str | None = None) -> SparkSession:
    """Return the process-wide SparkSession, creating it on first use."""
    # PySpark warns about pandas 3 on import; the jobs use Arrow, not pandas conversion.
    warnings.filterwarnings("ignore", message=".*pandas >= 3.0.0.*", category=FutureWarning)
    from pyspark.sql import SparkSession

    from cdc_core.changefeed import delta_jars

    with _lock:
        active = SparkSession.getActiveSession()
        if active is None:
            url = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
            builder = SparkSession.builder.appName(app_name)
            if url.startswith("sc://"):
                builder = builder.remote(url)
            else:
                builder = builder.master(url)
                for k, v in _STATIC_CONFS.items():
                    builder = builder.config(k, v)
                # delta-spark's jars (jars.lock, fetched by the bootstrap) with Delta's extension and catalog:
                # every session can MERGE, RESTORE and read Delta through Spark, whichever writer is chosen.
                for k, v in delta_jars.session_confs().items():
                    builder = builder.config(k, v)
                if url.startswith("local"):
                    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no hostname lookup warning
                    # Python workers (spark_jobs.upstream_read's mapInArrow fetch) run this interpreter, which
                    # has cdc_core and its dependencies; PySpark's default is whatever `python3` is on PATH.
                    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
                for k, v in _CONFS.items():
                    builder = builder.config(k, v)
            active = builder.getOrCreate()
            if not url.startswith("sc://"):
                active.sparkContext.setLogLevel(os.environ.get("CDCFLOW_SPARK_LOG_LEVEL", "ERROR"))
        for k, v in session_confs(active).items():
            active.conf.set(k, v)
        return active


def known_master() -> str | None:
    """The master of this process's session, told without starting one (no JVM start for a window that needs no
    Spark): the active session's, else the one :func:`get_spark` would give a session made here
    (``$CDCFLOW_SPARK_MASTER`` or ``DEFAULT_MASTER``). None when only a session can tell: a driver that
    ``spark-submit`` launched (its JVM holds the submit's master; PySpark's launcher hands the driver
    ``PYSPARK_GATEWAY_PORT``) or Spark Connect (the server's master)."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    url = os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    return None if url.startswith("sc://") else url


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no SparkContext, no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def session_confs(spark: SparkSession) -> dict[str, str]:
    """The session confs that apply to ``spark``: Spark Connect has no Arrow fallback to turn off (and warns
    when told to), it always uses Arrow."""
    if is_connect(spark):
        return {k: v for k, v in _CONFS.items() if k != "spark.sql.execution.arrow.pyspark.fallback.enabled"}
    return _CONFS
