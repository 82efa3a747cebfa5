"""The ``data_quality`` job's arguments: tables reconciled whole at a ts (``cdc_core.changefeed.reconcile`` and
``tasks`` send them; ``spark_jobs.checks.data_quality`` runs them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from cdc_core.changefeed.config import DqMode
from cdc_core.changefeed.job_args.base import (
    JobArgs,
    check_mode,
    check_names,
    entries_json,
    opt_ts,
    table_entries,
    ts_arg,
)
from cdc_core.schema.model import TableInfo


@dataclass(frozen=True)
class ReconcileArgs(JobArgs):
    """The ``data_quality`` job's arguments, checked when built (``cdc_core.changefeed.reconcile`` and ``tasks``
    send them; ``spark_jobs.checks.data_quality.run_checks`` says what each check does).

    ``tables`` are reconciled whole at ``ts`` (a snapshot of the upstream), each with whether its content is
    (False: event filters drop its rows on purpose, so only its structure is); ``as_of_ts`` reads the Delta tables as
    of that ts instead of their latest version. The upstream is ``pd_addr`` (and ``tidb``, default: the SQL servers
    registered in PD), read at ``ts``; or, for one table, ``expected_rows`` (``SELECT *`` rows a caller holds).
    ``single``: one ``table`` (the job returns its report) rather than ``tables``.

    Raises ``ValueError`` naming the argument: a missing one, one the job does not know, ``table`` and ``tables``
    both or neither, a ts that is not an integer, an unknown mode, ``expected_rows`` for more than one table.
    """

    JOB: ClassVar[str] = "data_quality"

    sink_uri: str
    ts: int
    tables: tuple[tuple[TableInfo, bool], ...]
    mode: DqMode = "checksum"
    as_of_ts: int | None = None
    pd_addr: str | None = None
    tidb: str | None = None
    expected_rows: list[dict[str, Any]] | None = None
    single: bool = False
    # the tables whose history table's open rows are compared with them too (``[sink] history``; latest versions only)
    history: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_mode(self.mode)
        if self.expected_rows is not None and len(self.tables) != 1:
            raise ValueError(f"{self.JOB}: expected_rows are one table's rows, got {len(self.tables)} tables")

    @classmethod
    def from_dict(cls, args: Mapping[str, Any]) -> ReconcileArgs:
        """``args`` as JSON gives them: ``table`` (TableInfo JSON or dict) with ``content``, or ``tables``
        (``{"table", "content"}`` each); ``content`` defaults to true."""
        job = cls.JOB
        check_names(job, args, {f.name for f in fields(cls) if f.name != "single"} | {"table", "content"},
                    ("sink_uri", "ts"))
        single = "tables" not in args
        if single == ("table" not in args):
            got = "neither" if single else "both"
            raise ValueError(f"{job}: give either table (with content) or tables; got {got}")
        if not single and "content" in args:
            raise ValueError(f"{job}: content goes with table; each of tables says its own")
        entries = [{"table": args["table"], "content": args.get("content", True)}] if single else args["tables"]
        return cls(sink_uri=str(args["sink_uri"]), ts=ts_arg(job, "ts", args["ts"]),
                   tables=table_entries(job, entries), mode=args.get("mode", "checksum"),
                   as_of_ts=opt_ts(job, "as_of_ts", args.get("as_of_ts")),
                   pd_addr=args.get("pd_addr"), tidb=args.get("tidb"), expected_rows=args.get("expected_rows"),
                   single=single, history=tuple(str(n) for n in args.get("history") or ()))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sink_uri": self.sink_uri, "ts": self.ts, "mode": self.mode, "as_of_ts": self.as_of_ts,
                               "pd_addr": self.pd_addr, "tidb": self.tidb, "expected_rows": self.expected_rows}
        if self.history:
            out["history"] = list(self.history)
        if self.single:
            (table, content), = self.tables
            return {**out, "table": table.to_json(), "content": content}
        return {**out, "tables": entries_json(self.tables)}
