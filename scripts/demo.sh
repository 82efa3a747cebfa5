#!/usr/bin/env bash
# `make demo`: the whole path once, through real Airflow.
#   embedded upstream → the changefeed's capture → two windows (cdcflow__demo DAG runs via `airflow dags test`,
#   reading the capture's parts) → Delta table
# Exits non-zero when any step fails (including the data-quality checks and the final verify).
#
# The demo's changefeed lives where `make airflow` looks ($CDCFLOW_HOME, default .cdcflow; its lake and logs in
# $CDCFLOW_HOME/demo/) and its runs in the same Airflow DB, so `make airflow` afterwards shows cdcflow__demo, its
# runs, checkpoint and checks. Running the demo again replaces the earlier demo's changefeed, lake and runs only.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH="$ROOT/.venv/bin:$PATH"
# shellcheck source=scripts/airflow_env.sh
source scripts/airflow_env.sh
DEMO_DIR="$CDCFLOW_HOME/demo"
SINK="$DEMO_DIR/lake"
DAG_ID=cdcflow__demo
# `dags test` honours retries and sleeps through the backoff: a demo should fail fast instead.
export CDCFLOW_TASK_RETRIES=0

say() { printf '\n\033[1;36m==> %s\033[0m\n' "$*"; }

# What cannot work (a Debian package root needs, a taken port, an upstream already running) says so here,
# before anything has started.
python scripts/preflight.py demo

# The Airflow metadata DB (a private PostgreSQL, see airflow_env.sh) is stopped at the end unless it was
# already running (`make airflow` in another terminal: the demo's runs then show in its UI).
db_was_running=yes
if [ "$CDCFLOW_AIRFLOW_DB" != sqlite ] && ! python scripts/local_postgres.py status --dir "$CDCFLOW_AIRFLOW_PG_DIR"; then
  db_was_running=no
fi
cleanup() {
  # the capture first: it subscribes to the upstream, which stops with the demo
  [ ! -f "$CDCFLOW_HOME/changefeeds/demo.toml" ] || cdcflow capture stop demo >/dev/null 2>&1 || true
  cdcflow upstream stop >/dev/null 2>&1 || true
  [ "$db_was_running" = yes ] || airflow_db_stop
}
trap cleanup EXIT

say "starting the embedded upstream"
if [ -f "$CDCFLOW_HOME/changefeeds/demo.toml" ]; then
  cdcflow changefeed remove demo >/dev/null  # an earlier demo's changefeed (its DAG's runs go below)
fi
rm -rf "$DEMO_DIR"
mkdir -p "$DEMO_DIR"
cdcflow upstream start --detach

say "creating demo.accounts (clustered PK) and demo.swap (seed 002 table)"
cdcflow upstream sql -e "
CREATE DATABASE demo;
CREATE TABLE demo.accounts (id INT PRIMARY KEY, owner VARCHAR(64) NOT NULL, balance DECIMAL(12,2) DEFAULT 0, opened DATETIME);
CREATE TABLE demo.t (a INT PRIMARY KEY, b INT);
"
START_TS=$(cdcflow tso now)

say "window 1 workload: inserts, an update, a delete, and seed 002's single PK update"
cdcflow upstream sql -e "
INSERT INTO demo.accounts VALUES (1, 'ada', 100.50, '2024-01-01 09:00:00'), (2, 'bob', 20, '2024-01-02 10:30:00'), (3, 'cyd', 0, NULL);
UPDATE demo.accounts SET balance = balance + 10 WHERE id = 2;
DELETE FROM demo.accounts WHERE id = 3;
INSERT INTO demo.t VALUES (1, 1);
UPDATE demo.t SET a = 2 WHERE a = 1;
"

say "creating changefeed 'demo' from start-ts $START_TS"
cat > "$DEMO_DIR/demo.toml" <<TOML
changefeed-id = "demo"
sink-uri = "file://$SINK"
start-ts = $START_TS

[filter]
rules = ["demo.*"]

[airflow]
schedule = "*/5 * * * *"

[data-quality]
mode = "checksum"
TOML
cdcflow changefeed create --config "$DEMO_DIR/demo.toml"

# The changefeed's continuous capture: it holds the subscriptions and writes the changelog in parts, so that the
# windows below read its parts and open no stream (the DAG would start it too: [capture] auto-start).
say "starting the capture of 'demo' (cdcflow capture start demo --detach)"
cdcflow capture start demo --detach >/dev/null
cdcflow capture status demo

bash scripts/airflow_init.sh
# An earlier demo's runs belong to a changefeed that is gone.
airflow dags delete "$DAG_ID" --yes >/dev/null 2>&1 || true

run_window() {
  local target=$1
  say "Airflow: dags test cdcflow__demo, window ending at $target"
  airflow dags test "$DAG_ID" "$(date -u +%Y-%m-%dT%H:%M:%S+00:00)" --conf "{\"target_ts\": \"$target\"}" \
    > "$DEMO_DIR/dags-test-$target.log" 2>&1 || { tail -n 60 "$DEMO_DIR/dags-test-$target.log"; exit 1; }
  grep -E "Marking run|state=|DagRun Finished" "$DEMO_DIR/dags-test-$target.log" | tail -n 3 || true
  local state
  state=$(cdcflow changefeed query demo | python -c 'import json,sys; d=json.load(sys.stdin); print(d["state"], d["checkpoint_ts"])')
  echo "changefeed: $state"
  [ "${state%% *}" != "error" ] || { cdcflow changefeed query demo; exit 1; }
  [ "${state##* }" = "$target" ] || { echo "checkpoint did not reach $target"; exit 1; }
}

run_window "$(cdcflow tso now)"

say "window 2 workload: seed 002's three-update PK swap in one transaction, more changes"
cdcflow upstream sql -e "
INSERT INTO demo.t VALUES (1, 2);
BEGIN;
UPDATE demo.t SET a = 3 WHERE a = 1;
UPDATE demo.t SET a = 1 WHERE a = 2;
UPDATE demo.t SET a = 2 WHERE a = 3;
COMMIT;
INSERT INTO demo.accounts (id, owner) VALUES (4, 'dee');
UPDATE demo.accounts SET owner = 'ada lovelace' WHERE id = 1;
"
run_window "$(cdcflow tso now)"

say "the Delta tables"
python - "$SINK" <<'PY'
import sys
from deltalake import DeltaTable
from rich.console import Console
from rich.table import Table
from cdc_core.process_exit import run_and_exit
def show() -> None:
    sink = sys.argv[1]
    for name in ("demo/accounts", "demo/t"):
        dt = DeltaTable(f"{sink}/{name}")
        data = dt.to_pyarrow_table().sort_by([(dt.schema().fields[0].name, "ascending")])
        t = Table(title=f"{name} (Delta version {dt.version()})")
        for c in data.column_names:
            t.add_column(c)
        for row in data.to_pylist():
            t.add_row(*["NULL" if v is None else str(v) for v in row.values()])
        Console().print(t)
# Arrow's thread pool can abort a finished reader at interpreter shutdown (see cdc_core/process_exit.py).
run_and_exit(show)
PY

say "the capture the windows read from (cdcflow capture status demo)"
cdcflow capture status demo

say "data-quality results at the last barrier"
cdcflow changefeed query demo > "$DEMO_DIR/query.json"
python - "$DEMO_DIR/query.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
checks = d["last_checks"]
print(f"checkpoint {d['checkpoint_ts']} ({d['checkpoint_time']}), mode {checks['mode']}")
for table, rep in checks["tables"].items():
    for r in rep["results"]:
        print(f"  {table:14} {r['expectation']:20} {'PASS' if r['success'] else 'FAIL'}  {r.get('details', '')}")
PY

say "cdcflow verify demo (upstream snapshot vs Delta at the checkpoint)"
cdcflow verify demo > "$DEMO_DIR/verify.json"
python - "$DEMO_DIR/verify.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    print(f"  {d['table']:14} {d['row_count']} rows  {'equal' if d['passed'] else 'DIFFERENT'}")
PY
# The demo's upstream stops with it (its data lives in memory): the scheduler of `make airflow` must not run
# windows against it. Paused, the DAG keeps its runs and the changefeed its checkpoint and checks to look at.
airflow dags pause "$DAG_ID" >/dev/null
say "demo finished: Delta equals the upstream snapshot"
echo "Next: 'make airflow' shows $DAG_ID (paused; its upstream stopped with the demo), its two runs, and on the"
echo "Changefeeds page the demo's checkpoint and checks. The demo's lake: $SINK"
