"""The ``snapshot_load`` job's arguments, one set per phase: fetch a snapshot's bases, load them, fold the silver
tables into bases (``cdc_core.changefeed.snapshot``, ``rebuild`` and ``retention`` send them;
``spark_jobs.snapshot_load`` runs them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

from cdc_core.changefeed.job_args.base import JobArgs, bool_arg, check_names, table_arg, ts_arg
from cdc_core.schema.model import TableInfo

DEFAULT_MAX_CHUNKS = 64  # a snapshot table's chunks read at once, unless the job is told otherwise
SnapshotPhase = Literal["fetch", "load", "fold"]


@dataclass(frozen=True)
class BaseLoad:
    """One table's base to load (phase "load"): the table (its names give the Delta path), the base directory, the
    app-txn version the load records and the load's id."""

    table: TableInfo
    base: str
    version: int
    load_id: str
    history: bool = False  # the table keeps a history table: the load opens one row per key there at ``version``

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table.to_json(), "base": self.base, "version": self.version, "load_id": self.load_id,
                "history": self.history}


_REQUIRED = {"fetch": ("sink_uri", "changefeed_id", "pd_addr", "ts", "tables"),
             "load": ("sink_uri", "changefeed_id", "loads"),
             "fold": ("sink_uri", "changefeed_id", "ts", "tables")}
_OPTIONAL = {"fetch": ("tidb", "max_chunks"), "load": ("change_data_feed",), "fold": ()}
_LOAD_KEYS = ("table", "base", "version", "load_id")


@dataclass(frozen=True)
class SnapshotJobArgs(JobArgs):
    """The ``snapshot_load`` job's arguments (``cdc_core.changefeed.snapshot``, ``rebuild`` and ``retention`` send
    them). Each ``phase`` takes its own:

    - "fetch": ``pd_addr``, ``ts``, ``tables`` (the tables at ``ts``), optional ``max_chunks`` and ``tidb``
      (TiDB's SQL addresses; default: those registered in PD);
    - "load": ``loads`` (:class:`BaseLoad` each);
    - "fold": ``ts``, ``tables`` (the tables at ``ts``);

    and all of them ``sink_uri`` and ``changefeed_id``. :meth:`from_dict` raises ``ValueError`` naming the
    argument: an unknown phase, a missing argument, one the phase does not take, a ts or version that is not an
    integer.
    """

    JOB: ClassVar[str] = "snapshot_load"

    phase: SnapshotPhase
    sink_uri: str
    changefeed_id: str
    ts: int | None = None
    tables: tuple[TableInfo, ...] = ()
    pd_addr: str | None = None
    tidb: str | None = None
    max_chunks: int = DEFAULT_MAX_CHUNKS
    loads: tuple[BaseLoad, ...] = ()
    change_data_feed: bool = False  # "load": a table the load creates takes the feed ([sink] change-data-feed)

    @classmethod
    def from_dict(cls, args: Mapping[str, Any]) -> SnapshotJobArgs:
        phase = args.get("phase")
        if not isinstance(phase, str) or phase not in _REQUIRED:
            raise ValueError(f"{cls.JOB}: phase must be 'fetch', 'load' or 'fold', got {phase!r}")
        job = f"{cls.JOB} ({phase})"
        check_names(job, args, ("phase", *_REQUIRED[phase], *_OPTIONAL[phase]), _REQUIRED[phase])
        loads = []
        for i, item in enumerate(args.get("loads") or ()):
            if not isinstance(item, Mapping):
                raise ValueError(f"{job}: loads[{i}] must be {{\"table\", \"base\", \"version\", \"load_id\"}}, "
                                 f"got {item!r}")
            check_names(f"{job} loads[{i}]", item, (*_LOAD_KEYS, "history"), _LOAD_KEYS)
            loads.append(BaseLoad(table_arg(item["table"]), str(item["base"]),
                                  ts_arg(job, f"loads[{i}].version", item["version"]), str(item["load_id"]),
                                  bool(item.get("history", False))))
        return cls(phase=cast(SnapshotPhase, phase), sink_uri=str(args["sink_uri"]),
                   changefeed_id=str(args["changefeed_id"]),
                   ts=ts_arg(job, "ts", args["ts"]) if "ts" in args else None,
                   tables=tuple(table_arg(x) for x in args.get("tables") or ()),
                   pd_addr=args.get("pd_addr"), tidb=args.get("tidb"),
                   max_chunks=_max_chunks(job, args.get("max_chunks")), loads=tuple(loads),
                   change_data_feed=bool_arg(job, "change_data_feed", args.get("change_data_feed", False)))

    def to_dict(self) -> dict[str, Any]:
        every: dict[str, Any] = {"phase": self.phase, "sink_uri": self.sink_uri, "changefeed_id": self.changefeed_id,
                                 "ts": self.ts, "tables": [t.to_json() for t in self.tables],
                                 "pd_addr": self.pd_addr, "tidb": self.tidb, "max_chunks": self.max_chunks,
                                 "loads": [b.to_dict() for b in self.loads], "change_data_feed": self.change_data_feed}
        return {k: every[k] for k in ("phase", *_REQUIRED[self.phase], *_OPTIONAL[self.phase])}


def _max_chunks(job: str, v: Any) -> int:
    if v is None:
        return DEFAULT_MAX_CHUNKS
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{job}: max_chunks must be a positive integer, got {v!r}")
    return v
