#!/usr/bin/env bash
# Start the project-local Airflow metadata DB (PostgreSQL cluster in $CDCFLOW_AIRFLOW_PG_DIR, left running;
# or SQLite in $AIRFLOW_HOME), then create or upgrade its schema. Idempotent; when the DB was already
# migrated by this Airflow version it returns without starting Airflow.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/airflow_env.sh
. scripts/airflow_env.sh

mkdir -p "$AIRFLOW_HOME" "$CDCFLOW_HOME/changefeeds"
if [ "$CDCFLOW_AIRFLOW_DB" = sqlite ]; then
  db="$AIRFLOW_HOME/airflow.db"
  present() { [ -s "$db" ]; }
else
  db="$CDCFLOW_AIRFLOW_PG_DIR"
  python scripts/local_postgres.py start --dir "$db" --port "$CDCFLOW_AIRFLOW_PG_PORT" >/dev/null
  present() { [ -f "$db/PG_VERSION" ]; }
fi
stamp="$AIRFLOW_HOME/.cdcflow-db-migrated"
want="$(python -c 'import importlib.metadata as m; print(m.version("apache-airflow-core"))') $AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
if present && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "airflow_init: migrating the Airflow DB at $db"
airflow db migrate
echo "$want" > "$stamp"
