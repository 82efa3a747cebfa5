"""The ``window_checks`` job's arguments (a window's tables checked at the keys it changed) and those of its read
ahead, ``window_checks_read_ahead`` (``cdc_core.changefeed.tasks`` sends them; ``spark_jobs.checks.window_checks`` and
``spark_jobs.checks.check_read_ahead`` run them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from cdc_core.changefeed.config import DqMode
from cdc_core.changefeed.job_args.base import JobArgs, check_mode, check_names, entries_json, table_entries, ts_arg
from cdc_core.schema.model import TableInfo


def check_dq(mode: str, content: bool, pd_addr: str | None) -> None:
    """Refuse checks that cannot run: a mode not in ``DQ_MODES``, or content to compare without the upstream."""
    check_mode(mode)
    if mode != "off" and content and pd_addr is None:
        raise ValueError("the changed-key checks need the upstream (pd_addr)")


@dataclass(frozen=True)
class WindowChecksArgs(JobArgs):
    """The ``window_checks`` job's arguments, checked when built (``cdc_core.changefeed.tasks`` sends them).

    ``tables`` are the tables to check, each with whether its content is (False: event filters drop its rows on
    purpose, so only its structure is); their changed keys are those of the bronze window ``window_end_ts`` with
    ``after_ts < commit_ts <= ts``, checked at ``ts``. ``pd_addr`` is the upstream's PD, needed unless the mode is
    "off" or no table's content is checked; ``tidb`` its SQL addresses (default: those registered in PD).
    ``derive_counts`` names the tables whose upstream count may be derived from the count checked at ``after_ts``
    and the changed keys (``spark_jobs.upstream_read.upstream_count_since``): those no DDL job touched in
    ``(after_ts, ts]``, which the runner knows from its schema log. A RENAME, TRUNCATE, partition DDL or EXCHANGE
    PARTITION between the two moves rows no event names, so the others (and every table, by default) are counted
    with ``SELECT COUNT(*)``.

    Raises ``ValueError`` naming the argument: a missing one, one the job does not know (a typo would otherwise be
    ignored), a ts that is not an integer, an unknown mode, content to check without ``pd_addr``.
    """

    JOB: ClassVar[str] = "window_checks"

    sink_uri: str
    changefeed_id: str
    window_end_ts: int
    tables: tuple[tuple[TableInfo, bool], ...]
    after_ts: int
    ts: int
    mode: DqMode = "checksum"
    pd_addr: str | None = None
    tidb: str | None = None
    derive_counts: tuple[str, ...] = ()
    history: tuple[str, ...] = ()  # the tables whose history table's open rows are compared with them

    def __post_init__(self) -> None:
        check_dq(self.mode, any(c for _, c in self.tables), self.pd_addr)
        known = {t.qualified_name for t, _ in self.tables}
        unknown = [n for n in self.derive_counts if n not in known]
        if unknown:
            raise ValueError(f"{self.JOB}: derive_counts names tables it does not check: {unknown}")

    def derives_count(self, table: TableInfo) -> bool:
        """Whether ``table``'s upstream count is derived from the count at ``after_ts`` (else ``COUNT(*)``)."""
        return table.qualified_name in self.derive_counts

    @classmethod
    def from_dict(cls, args: Mapping[str, Any]) -> WindowChecksArgs:
        """``args`` as JSON gives them: each of ``tables`` is ``{"table": <TableInfo JSON or dict>, "content":
        <bool, default true>}``."""
        job = WindowChecksArgs.JOB  # the read ahead reads the same arguments, and is refused in the same words
        check_names(job, args, [f.name for f in fields(cls)],
                    ("sink_uri", "changefeed_id", "window_end_ts", "tables", "after_ts", "ts"))
        return cls(sink_uri=str(args["sink_uri"]), changefeed_id=str(args["changefeed_id"]),
                   window_end_ts=ts_arg(job, "window_end_ts", args["window_end_ts"]),
                   tables=table_entries(job, args["tables"]),
                   after_ts=ts_arg(job, "after_ts", args["after_ts"]), ts=ts_arg(job, "ts", args["ts"]),
                   mode=args.get("mode", "checksum"), pd_addr=args.get("pd_addr"), tidb=args.get("tidb"),
                   derive_counts=_names(job, args.get("derive_counts", ())),
                   history=_names(job, args.get("history", ())))

    def to_dict(self) -> dict[str, Any]:
        return {"sink_uri": self.sink_uri, "changefeed_id": self.changefeed_id, "window_end_ts": self.window_end_ts,
                "tables": entries_json(self.tables), "after_ts": self.after_ts, "ts": self.ts, "mode": self.mode,
                "pd_addr": self.pd_addr, "tidb": self.tidb, "derive_counts": list(self.derive_counts),
                "history": list(self.history)}

    @property
    def reads_upstream(self) -> bool:
        """Whether the checks read the upstream: a mode other than "off" and a table whose content is checked."""
        return self.mode != "off" and self.pd_addr is not None and any(c for _, c in self.tables)

    def key(self) -> str:
        """The arguments as one string: what a read ahead for this job is found by
        (``spark_jobs.checks.check_read_ahead``)."""
        return json.dumps([self.sink_uri, self.changefeed_id, self.window_end_ts, self.after_ts, self.ts, self.mode,
                           self.pd_addr, self.tidb, [(t.to_json(), c) for t, c in self.tables],
                           list(self.derive_counts)])


def _names(job: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(n, str) for n in value):
        raise ValueError(f"{job}: derive_counts must be a list of table names, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class ReadAheadArgs(WindowChecksArgs):
    """The ``window_checks_read_ahead`` job's arguments: those of the ``window_checks`` job it reads ahead for."""

    JOB: ClassVar[str] = "window_checks_read_ahead"

    @classmethod
    def ahead_of(cls, checks: WindowChecksArgs) -> ReadAheadArgs:
        """The read ahead for the ``window_checks`` job of ``checks``."""
        return cls(**{f.name: getattr(checks, f.name) for f in fields(checks)})
