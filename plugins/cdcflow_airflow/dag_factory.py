"""Build one Airflow DAG per changefeed: ``plan >> wait >> pull >> apply_check >> publish``.

Each task but ``wait`` calls the function of the same name in ``cdc_core.changefeed.tasks``, the code behind
``cdcflow changefeed run``, so a DAG run and a CLI run do exactly the same thing.

A run's window ends at its data interval end converted to a TSO (``tso.from_datetime(end,
end_of_ms=True)``): the schedule is a ``CronDataIntervalTimetable``, so the run at 12:05 of a
``*/5`` changefeed covers commits up to 12:05:00.000 inclusive. ``cdc_core.changefeed.tasks.plan``
caps that with the changefeed's target-ts and the ``target_ts`` parameter of a manual trigger.

The tasks' bodies are in :mod:`cdcflow_airflow.window_tasks`. Parse-time cost: reading the TOML config only.
``cdc_core.changefeed.tasks`` (Spark, gRPC) is imported inside the tasks, never when the scheduler or the dag
processor parses the DAG file.
Airflow's plugin manager imports this module at start-up too, so keep its top level cheap.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow.sdk import DAG, CronDataIntervalTimetable, DeltaDataIntervalTimetable, Param, task
from airflow.sdk.definitions.retry_policy import ExceptionRetryPolicy, RetryAction, RetryRule

from cdcflow_airflow.names import dag_id_for

log = logging.getLogger("cdcflow.airflow")

TAGS = ["cdcflow", "cdc"]
OWNER = "cdcflow"
TASK_IDS = ("plan", "wait", "pull", "apply_check", "publish")
MODES = ("incremental", "snapshot", "rebuild")

# pull waits for the upstream resolved ts to pass the window end, so it gets the longest budget
# after apply (a Spark job); plan and publish only touch local state.
TASK_TIMEOUTS: dict[str, timedelta] = {
    "plan": timedelta(hours=2),  # mostly waiting for another run's window to finish (the lease)
    "wait": timedelta(minutes=5),  # the worker part only; the deferred wait has its own timeout
    "pull": timedelta(hours=1),
    "apply_check": timedelta(hours=3),
    "publish": timedelta(minutes=10),
}

# A changefeed without a start-ts gets this start_date. Only matters with catchup = true.
FALLBACK_START_DATE = datetime(2025, 1, 1, tzinfo=UTC)

# Failures that a retry cannot fix fail the task at once instead of backing off for an hour.
RETRY_POLICY = ExceptionRetryPolicy(
    rules=[
        RetryRule(
            exception=["cdc_core.errors.DataQualityError", "cdc_core.errors.ConfigError"],
            action=RetryAction.FAIL,
            reason="data-quality and configuration errors are deterministic; retrying cannot fix them",
        ),
    ],
)

DEFAULT_RETRIES = 3
# CDCFLOW_TASK_RETRIES overrides the retry count at parse time, e.g. 0 for `airflow dags test` in
# end-to-end tests: `dags test` honours retries and really sleeps through the backoff.
RETRIES_ENV = "CDCFLOW_TASK_RETRIES"

DEFAULT_ARGS: dict[str, Any] = {
    "owner": OWNER,
    "retries": DEFAULT_RETRIES,
    "retry_delay": timedelta(seconds=30),
    # Airflow 3 takes a multiplier here (2.x took a bool): 30 s, 60 s, 120 s ... capped below.
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": timedelta(minutes=15),
    "retry_policy": RETRY_POLICY,
}

# A decimal TSO or an ISO-8601 datetime (see cdc_core.codec.tso.parse_ts_or_datetime).
TARGET_TS_PATTERN = r"^\s*([0-9]+|[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9:.,]+)?(Z|[+-][0-9]{2}:?[0-9]{2})?)\s*$"


def task_retries() -> int:
    text = os.environ.get(RETRIES_ENV, "").strip()
    if not text:
        return DEFAULT_RETRIES
    if not text.isdigit():
        raise ValueError(f"{RETRIES_ENV} must be a non-negative integer, got {text!r}")
    return int(text)


TABLE_NAME_PATTERN = r"^[^.\s`]+\.[^.\s`]+$"


def known_tables(changefeed_id: str) -> list[str]:
    """The tables the changefeed's last published window covered ("db.table"), for the form's pick list."""
    try:
        from cdc_core.changefeed.state import load_state

        last = load_state(changefeed_id).last_window or {}
    except Exception:  # no state yet or unreadable: the form then takes free text; plan validates either way
        return []
    return sorted(str(t) for t in (last.get("tables") or {}))


def build_params(tables: list[str] | None = None) -> dict[str, Param]:
    """The trigger form of a changefeed DAG, validated by Airflow against each Param's JSON schema.

    ``tables``: the known table names; given, the form's Tables field is a multi-select of them (JSON
    schema ``examples`` on an array); otherwise it takes typed "db.table" names.
    """
    table_choices: dict[str, Any] = {"examples": list(tables)} if tables else {}
    return {
        "target_ts": Param(
            None,
            type=["null", "string"],
            pattern=TARGET_TS_PATTERN,
            title="Target ts",
            description=(
                "Stop this run's window here instead of at the data interval end: a TSO (decimal "
                "integer) or an ISO-8601 datetime (UTC when no zone is given). The run uses the "
                "smallest of this, the interval end and the changefeed's target-ts. Empty: the "
                "interval end."
            ),
        ),
        "mode": Param(
            "incremental",
            type="string",
            enum=list(MODES),
            title="Mode",
            description=(
                "incremental: apply the changes after the checkpoint. snapshot: reload the tables "
                "from the upstream at the checkpoint, then apply the window. rebuild: replace the "
                "tables by replaying the bronze changelog (once per backfill), then apply the window."
            ),
        ),
        "tables": Param(
            None,
            type=["null", "array"],
            items={"type": "string", "pattern": TABLE_NAME_PATTERN},
            uniqueItems=True,
            title="Tables",
            description=(
                "snapshot and rebuild only: the upstream tables (db.table) they cover. Empty: every "
                "table of the changefeed. An incremental window always covers every table."
            ),
            **table_choices,
        ),
        "full_check": Param(
            False,
            type="boolean",
            title="Full check",
            description=(
                "Also reconcile every replicated table whole against the upstream at the window end (every row "
                "compared, chunk by chunk; it costs what the tables hold). Off: the checks cost what the window "
                "changed (see docs/data-quality.md)."
            ),
        ),
        "dry_run": Param(
            False,
            type="boolean",
            title="Dry run",
            description="Only compute and log the window (plan); pull, apply_check and publish do nothing.",
        ),
    }


# `schedule = "30s"` / `"5m"` / `"1h"`: windows of a fixed length on an epoch-aligned grid. Cron cannot go below a
# minute, and a changefeed is often wanted fresher than that.
def timetable_for(schedule: str | None) -> CronDataIntervalTimetable | DeltaDataIntervalTimetable | str | None:
    """The DAG schedule for a changefeed's ``[airflow] schedule`` (``cdc_core.changefeed.schedule``): ``None`` for
    manual runs only, ``"@once"``, a delta timetable for a duration, else a data-interval cron timetable in UTC.
    Either way each run has a window ``(start, end]``. A schedule that means nothing raises ``ConfigError`` with
    the message ``cdcflow changefeed create`` gives."""
    from cdc_core.changefeed.schedule import parse_schedule

    parsed = parse_schedule(schedule)
    if parsed.kind == "none":
        return None
    if parsed.kind == "once":
        return "@once"
    if parsed.every is not None:
        return DeltaDataIntervalTimetable(parsed.every)
    timetable = CronDataIntervalTimetable(str(parsed.cron), timezone="UTC")
    timetable.validate()
    return timetable


def redact_uri(uri: str) -> str:
    """A sink URI fit for the UI: password masked, query string dropped (it may carry credentials)."""
    parts = urlsplit(uri)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def start_date_for(config: Any) -> datetime:
    from cdc_core.codec import tso

    start_ts = getattr(config, "start_ts", None) or 0
    if start_ts <= 0:
        return FALLBACK_START_DATE
    return tso.to_datetime(start_ts).replace(second=0, microsecond=0)


def doc_md_for(config: Any, schedule_text: str) -> str:
    sink = redact_uri(config.sink_uri).rstrip("/")
    target = getattr(config, "target_ts", None)
    return f"""\
### cdcflow changefeed `{config.changefeed_id}`

Replicates the changefeed's upstream tables into **Delta Lake**, one resolved-ts window per run,
exactly once (each Delta commit carries the application transaction `cdcflow/{config.changefeed_id}`).

**Delta tables:** `{sink}/<db>/<table>` (one per upstream table);
bronze changelog under `{sink}/_cdcflow/changelog/`.

**Window:** from the changefeed's checkpoint-ts to `min(data interval end as TSO, changefeed
target-ts{f" = {target}" if target else ""}, params.target_ts)`. A run whose window is already
covered by the checkpoint succeeds without doing anything.

**Schedule:** `{schedule_text}` (UTC, data intervals), catchup {"on" if config.catchup else "off"},
one active run at a time.

| task | does |
| --- | --- |
| `plan` | reads the checkpoint and computes the window's target ts (waits for the window lease) |
| `wait` | waits, deferred to the triggerer, until the upstream resolved-ts passes the target |
| `pull` | writes the window's row changes and DDL to the bronze changelog |
| `apply_check` | Spark: applies the window into the Delta tables barrier by barrier (DML, then the DDL); \
data-quality checks against the upstream snapshot at every barrier and at the window end (not retried) |
| `publish` | advances the checkpoint, emits an asset event per changed table |

Same code as `cdcflow changefeed run {config.changefeed_id}`.
"""


def build_dag(config: Any) -> DAG:
    """The DAG of one changefeed config (a ``cdc_core.changefeed.config.ChangefeedConfig``)."""
    from cdcflow_airflow.hooks import upstream_pre_execute
    from cdcflow_airflow.window_tasks import asset_alias_for, run_apply_check, run_plan, run_publish, run_pull

    changefeed_id: str = config.changefeed_id
    schedule_text = (getattr(config, "schedule", None) or "*/5 * * * *").strip()
    timetable = timetable_for(schedule_text)

    with DAG(
        dag_id=dag_id_for(changefeed_id),
        description=f"cdcflow changefeed {changefeed_id} → {redact_uri(config.sink_uri)}",
        doc_md=doc_md_for(config, schedule_text),
        schedule=timetable,
        start_date=start_date_for(config),
        catchup=bool(getattr(config, "catchup", False)),
        max_active_runs=1,
        tags=list(TAGS),
        # pre_execute: the upstream address from the `cdcflow_upstream_default` connection, when the config has none.
        default_args={**DEFAULT_ARGS, "retries": task_retries(), "pre_execute": upstream_pre_execute(changefeed_id)},
        params=build_params(known_tables(changefeed_id)),
    ) as dag:
        # multiple_outputs=False: the return values are dicts and must stay one XCom each.
        @task(task_id="plan", execution_timeout=TASK_TIMEOUTS["plan"], multiple_outputs=False)
        def plan_task(**context):
            return run_plan(changefeed_id, context)

        @task(task_id="pull", execution_timeout=TASK_TIMEOUTS["pull"], multiple_outputs=False)
        def pull_task(plan, **context):
            return run_pull(plan, context)

        @task(task_id="apply_check", execution_timeout=TASK_TIMEOUTS["apply_check"], multiple_outputs=False)
        def apply_check_task(plan, **context):
            return run_apply_check(plan, context)

        @task(task_id="publish", execution_timeout=TASK_TIMEOUTS["publish"], multiple_outputs=False,
              outlets=[asset_alias_for(changefeed_id)])
        def publish_task(plan, applied_checked, **context):
            return run_publish(plan, applied_checked, context)

        from cdcflow_airflow.operators import ResolvedTsSensor

        planned = plan_task()
        waited = ResolvedTsSensor(task_id="wait", plan=planned, execution_timeout=TASK_TIMEOUTS["wait"])
        pulled = pull_task(planned)
        waited >> pulled
        applied_checked = apply_check_task(planned)
        published = publish_task(planned, applied_checked)
        pulled >> applied_checked >> published
    return dag


def dag_for_config_file(path: str) -> DAG:
    """The DAG of the changefeed configured in ``path`` (a file of ``cdcflow_airflow.bundle``'s folder calls
    this). A config that does not load raises the ``ConfigError`` ``cdcflow changefeed create`` gives for it: the
    import error of that file only. A config whose file name is not its id (``cdcflow changefeed create`` names
    it ``<id>.toml``) is refused too: another config may hold that id."""
    from pathlib import Path

    from cdc_core.changefeed.config import load_config_file
    from cdc_core.errors import ConfigError

    config = load_config_file(Path(path))
    if config.changefeed_id != Path(path).stem:
        raise ConfigError(f"{path}: `changefeed-id` {config.changefeed_id!r} is not the file's name; a changefeed's "
                          f"config is {config.changefeed_id}.toml (`cdcflow changefeed create` writes it so)")
    return build_dag(config)

