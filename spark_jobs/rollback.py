"""Roll silver tables back to the changefeed's state at its checkpoint, when a check failed.

A window's steps commit to Delta before the checks of their barrier run. When a check fails, every table the
checks covered is restored to its version at the checkpoint (:func:`spark_jobs.checks.data_quality.version_as_of`) by a
Delta RESTORE whose commit also sets the changefeed's application transaction back to the checkpoint: readers of
the latest version never see the data that failed, and the steps re-run after ``changefeed resume`` (a re-run
skips only what the app transaction says is applied). The RESTORE keeps the failed versions in the table's history
(time travel, ``dq_results`` hold the evidence). A table that did not exist at the checkpoint is left as it is
(nothing to restore to; its creation was not checked either).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from cdc_core.changefeed.job_args.rollback import RollbackArgs
from cdc_core.codec.sink_uri import app_id_for, at_barrier_app_id_for, table_path
from cdc_core.schema.model import TableInfo
from spark_jobs.checks.data_quality import version_as_of
from spark_jobs.job_io import args_file_main
from spark_jobs.load.delta_writer import commit_metadata

log = logging.getLogger(__name__)


def roll_back(sink: str, changefeed_id: str, tables: Sequence[TableInfo], to_ts: int, reason: str
              ) -> dict[str, dict[str, Any]]:
    """Restore each of ``tables`` written after ``to_ts`` to its version at ``to_ts``; what was done, per table."""
    from deltalake import CommitProperties, DeltaTable, Transaction

    out: dict[str, dict[str, Any]] = {}
    for t in tables:
        path = table_path(sink, t)
        if not DeltaTable.is_deltatable(path):
            out[t.qualified_name] = {"restored": False, "why": "no Delta table"}
            continue
        dt = DeltaTable(path)
        current, target = dt.version(), version_as_of(path, to_ts)
        if target is None:
            out[t.qualified_name] = {"restored": False, "why": f"created after {to_ts}", "version": current}
        elif target == current:
            out[t.qualified_name] = {"restored": False, "why": "unchanged since the checkpoint", "version": current}
        else:
            # The at-barrier app id goes back too: DML at a later DDL's commit ts re-runs with its DDL.
            props = CommitProperties(
                app_transactions=[Transaction(app_id=app_id_for(changefeed_id), version=to_ts),
                                  Transaction(app_id=at_barrier_app_id_for(changefeed_id), version=to_ts)],
                custom_metadata={**commit_metadata(t, to_ts), "cdcflow.rollback": reason[:500]})
            dt.restore(target, commit_properties=props)
            out[t.qualified_name] = {"restored": True, "from_version": current, "to_version": target,
                                     "version": DeltaTable(path).version()}
            log.warning("rolled %s back from version %d to %d (its state at %d): %s", t.qualified_name, current,
                        target, to_ts, reason)
    return out


def run_job(opts: RollbackArgs) -> dict[str, Any]:
    """The ``cdc_core.changefeed.spark_engine`` entry point: ``RollbackArgs`` in, JSON out: ``{"tables": {name:
    what was done}}``."""
    return {"tables": roll_back(opts.sink_uri, opts.changefeed_id, opts.tables, opts.ts, opts.reason)}


def main(argv: Sequence[str] | None = None) -> int:
    return args_file_main("spark_jobs.rollback", "Restore silver tables to their state at a ts.", run_job,
                          RollbackArgs, argv)


if __name__ == "__main__":
    from cdc_core.process_exit import run_and_exit

    run_and_exit(main)
