#!/usr/bin/env bash
# Create or upgrade the project-local Airflow metadata DB (SQLite in $AIRFLOW_HOME). Idempotent; when
# the DB was already migrated by this Airflow version it returns without starting Airflow.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/airflow_env.sh
. scripts/airflow_env.sh

mkdir -p "$AIRFLOW_HOME" "$CDCFLOW_HOME/changefeeds"
db="$AIRFLOW_HOME/airflow.db"
stamp="$AIRFLOW_HOME/.cdcflow-db-migrated"
want="$(python -c 'import importlib.metadata as m; print(m.version("apache-airflow-core"))') $db"
if [ -s "$db" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "airflow_init: migrating the Airflow DB at $db"
airflow db migrate
echo "$want" > "$stamp"
