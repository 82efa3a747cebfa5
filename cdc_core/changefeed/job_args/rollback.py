"""The ``rollback`` job's arguments: silver tables restored to their state at a ts (``cdc_core.changefeed.tasks``
sends them after a failed check; ``spark_jobs.rollback`` runs them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from cdc_core.changefeed.job_args.base import JobArgs, check_names, table_arg, ts_arg
from cdc_core.schema.model import TableInfo


@dataclass(frozen=True)
class RollbackArgs(JobArgs):
    """The ``rollback`` job's arguments (``cdc_core.changefeed.tasks`` sends them): restore ``tables`` of
    ``changefeed_id``'s silver tables under ``sink_uri`` to their state at ``ts``, logging ``reason``.

    :meth:`from_dict` raises ``ValueError`` naming the argument: a missing one, one the job does not know, a ts that
    is not an integer."""

    JOB: ClassVar[str] = "rollback"

    sink_uri: str
    changefeed_id: str
    tables: tuple[TableInfo, ...]
    ts: int
    reason: str = "a check failed"

    @classmethod
    def from_dict(cls, args: Mapping[str, Any]) -> RollbackArgs:
        check_names(cls.JOB, args, [f.name for f in fields(cls)], ("sink_uri", "changefeed_id", "tables", "ts"))
        tables = tuple(table_arg(t) for t in args["tables"])
        return cls(str(args["sink_uri"]), str(args["changefeed_id"]), tables, ts_arg(cls.JOB, "ts", args["ts"]),
                   str(args.get("reason") or "a check failed"))

    def to_dict(self) -> dict[str, Any]:
        return {"sink_uri": self.sink_uri, "changefeed_id": self.changefeed_id,
                "tables": [t.to_json() for t in self.tables], "ts": self.ts, "reason": self.reason}
