"""The ``maintain`` job's arguments: one Delta table's compaction and vacuum (``cdc_core.changefeed.upkeep`` sends
them; ``spark_jobs.maintain`` runs them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from cdc_core.changefeed.job_args.base import JobArgs, bool_arg, check_names


@dataclass(frozen=True, kw_only=True)
class MaintainArgs(JobArgs):
    """The ``maintain`` job's arguments (``cdc_core.changefeed.upkeep`` sends them): compact the Delta table at
    ``path``, write a ``checkpoint`` of its log when asked, then vacuum what no version of the last
    ``retention_hours`` references (``enforce_retention_duration``: refuse a retention below the table's own).

    Raises ``ValueError`` naming the argument: a missing one, one the job does not know, a retention that is not
    a non-negative integer, a flag that is not true or false."""

    JOB: ClassVar[str] = "maintain"

    path: str
    retention_hours: int
    enforce_retention_duration: bool = True
    checkpoint: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.retention_hours, bool) or not isinstance(self.retention_hours, int) \
                or self.retention_hours < 0:
            raise ValueError(f"{self.JOB}: retention_hours must be an integer >= 0, got {self.retention_hours!r}")

    @classmethod
    def from_dict(cls, args: Mapping[str, Any]) -> MaintainArgs:
        job = cls.JOB
        check_names(job, args, [f.name for f in fields(cls)], ("path", "retention_hours"))
        return cls(path=str(args["path"]), retention_hours=args["retention_hours"],
                   enforce_retention_duration=bool_arg(job, "enforce_retention_duration",
                                                        args.get("enforce_retention_duration", True)),
                   checkpoint=bool_arg(job, "checkpoint", args.get("checkpoint", False)))

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "retention_hours": self.retention_hours,
                "enforce_retention_duration": self.enforce_retention_duration, "checkpoint": self.checkpoint}
