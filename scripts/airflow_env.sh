# shellcheck shell=sh
# Project-local Airflow setup. Source it from the repository root (POSIX sh, so `make`'s /bin/sh can
# `. scripts/airflow_env.sh` too):
#
#     . scripts/airflow_env.sh && scripts/airflow_init.sh && airflow dags test cdcflow__demo
#
# Everything lives under the repository: the Airflow home (SQLite DB, airflow.cfg, logs) in .airflow/,
# changefeed configs and state in .cdcflow/. Nothing here needs the network.
# Overrides: CDCFLOW_ROOT (repository root, default $PWD), CDCFLOW_AIRFLOW_HOME (default
# $CDCFLOW_ROOT/.airflow, e.g. a temp dir for an end-to-end test), CDCFLOW_HOME (default
# $CDCFLOW_ROOT/.cdcflow).

CDCFLOW_ROOT="${CDCFLOW_ROOT:-$(pwd)}"
export CDCFLOW_ROOT
export CDCFLOW_HOME="${CDCFLOW_HOME:-$CDCFLOW_ROOT/.cdcflow}"

# A global AIRFLOW_HOME (~/airflow) must not leak in: always the project-local one.
export AIRFLOW_HOME="${CDCFLOW_AIRFLOW_HOME:-$CDCFLOW_ROOT/.airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$CDCFLOW_ROOT/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$CDCFLOW_ROOT/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# SQLite needs an absolute path: sqlite:////abs/path (four slashes).
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"
# Airflow 3 runs LocalExecutor on SQLite (SequentialExecutor is gone); `dags test` ignores the
# executor and runs the tasks in-process.
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
