# shellcheck shell=sh
# Project-local Airflow setup. Source it from the repository root (POSIX sh, so `make`'s /bin/sh can
# `. scripts/airflow_env.sh` too):
#
#     . scripts/airflow_env.sh && scripts/airflow_init.sh && airflow dags test cdcflow__demo
#
# Everything lives under the repository: the Airflow home (airflow.cfg, logs, the metadata DB) in .airflow/,
# changefeed configs and state in .cdcflow/. Nothing here needs the network.
# Overrides: CDCFLOW_ROOT (repository root, default $PWD), CDCFLOW_AIRFLOW_HOME (default
# $CDCFLOW_ROOT/.airflow, e.g. a temp dir for an end-to-end test), CDCFLOW_HOME (default
# $CDCFLOW_ROOT/.cdcflow), and for the metadata DB: CDCFLOW_AIRFLOW_DB (postgres | sqlite),
# CDCFLOW_AIRFLOW_PG_DIR (default $AIRFLOW_HOME/pg), CDCFLOW_AIRFLOW_PG_PORT (default 5433); for Spark:
# CDCFLOW_SPARK_MASTER, CDCFLOW_SPARK_CONNECT_DIR (default $AIRFLOW_HOME/spark), CDCFLOW_SPARK_CONNECT_PORT
# (default 15002).

CDCFLOW_ROOT="${CDCFLOW_ROOT:-$(pwd)}"
export CDCFLOW_ROOT
export CDCFLOW_HOME="${CDCFLOW_HOME:-$CDCFLOW_ROOT/.cdcflow}"

# A global AIRFLOW_HOME (~/airflow) must not leak in: always the project-local one.
export AIRFLOW_HOME="${CDCFLOW_AIRFLOW_HOME:-$CDCFLOW_ROOT/.airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$CDCFLOW_ROOT/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$CDCFLOW_ROOT/plugins"
# The changefeeds' DAGs come from a bundle of their own, a DAG file per config (plugins/cdcflow_airflow/bundle.py);
# the DAGs folder keeps the maintenance DAG. The value is bundle_config.bundle_config_list() (a test compares them).
export AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST='[{"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}}, {"name": "cdcflow-changefeeds", "classpath": "cdcflow_airflow.bundle.ChangefeedDagBundle", "kwargs": {"refresh_interval": 10}}]'
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# The metadata DB: a private PostgreSQL cluster (scripts/local_postgres.py; airflow_init.sh starts it) on
# 127.0.0.1. On SQLite, `airflow backfill create` beside a running scheduler fails with "database is locked"
# (Airflow: backfills are "not supported on SQLite under concurrent access"). CDCFLOW_AIRFLOW_DB=sqlite keeps
# a single file instead, for machines without PostgreSQL's server, at that cost.
export CDCFLOW_AIRFLOW_DB="${CDCFLOW_AIRFLOW_DB:-postgres}"
export CDCFLOW_AIRFLOW_PG_DIR="${CDCFLOW_AIRFLOW_PG_DIR:-$AIRFLOW_HOME/pg}"
export CDCFLOW_AIRFLOW_PG_PORT="${CDCFLOW_AIRFLOW_PG_PORT:-5433}"
if [ "$CDCFLOW_AIRFLOW_DB" = sqlite ]; then
  # SQLite needs an absolute path: sqlite:////abs/path (four slashes).
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
else
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg2://airflow@127.0.0.1:$CDCFLOW_AIRFLOW_PG_PORT/airflow"
fi
# Stop the metadata DB's server (nothing for SQLite or when it is not running).
airflow_db_stop() {
  [ "$CDCFLOW_AIRFLOW_DB" = sqlite ] || python "$CDCFLOW_ROOT/scripts/local_postgres.py" stop --dir "$CDCFLOW_AIRFLOW_PG_DIR" || true
}
# Spark for `make airflow`'s tasks: every task is a process of its own, so instead of a JVM per apply / check
# task, one local Spark Connect server (scripts/spark_connect.py) that the tasks reach at CDCFLOW_SPARK_MASTER
# = sc://127.0.0.1:$CDCFLOW_SPARK_CONNECT_PORT. A CDCFLOW_SPARK_MASTER set beforehand (a cluster) wins and no
# server is started. (`airflow dags test`, as make demo runs it, keeps every task in one process: embedded.)
export CDCFLOW_SPARK_CONNECT_DIR="${CDCFLOW_SPARK_CONNECT_DIR:-$AIRFLOW_HOME/spark}"
export CDCFLOW_SPARK_CONNECT_PORT="${CDCFLOW_SPARK_CONNECT_PORT:-15002}"
spark_connect_start() {
  if [ -z "${CDCFLOW_SPARK_MASTER:-}" ]; then
    CDCFLOW_SPARK_MASTER=$(python "$CDCFLOW_ROOT/scripts/spark_connect.py" start --dir "$CDCFLOW_SPARK_CONNECT_DIR" --port "$CDCFLOW_SPARK_CONNECT_PORT")
    export CDCFLOW_SPARK_MASTER
  fi
}
spark_connect_stop() {
  python "$CDCFLOW_ROOT/scripts/spark_connect.py" stop --dir "$CDCFLOW_SPARK_CONNECT_DIR" || true
}
# Airflow 3 runs LocalExecutor (SequentialExecutor is gone); `dags test` ignores the executor and runs the
# tasks in-process.
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__CORE__DEFAULT_TIMEZONE=utc
# FAB is not installed, so the UI uses Airflow 3's default SimpleAuthManager. Local development
# only: every UI user is an admin, no login form (`airflow standalone` / `api-server` on localhost).
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS:-True}"
# New changefeed DAGs run on their schedule as soon as the scheduler sees them.
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False

if [ -d "$CDCFLOW_ROOT/.venv/bin" ]; then
  case ":$PATH:" in
    *":$CDCFLOW_ROOT/.venv/bin:"*) ;;
    *) PATH="$CDCFLOW_ROOT/.venv/bin:$PATH"; export PATH ;;
  esac
fi
