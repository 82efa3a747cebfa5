"""The ``apply_window`` job's arguments: one DML step of a bronze window (``cdc_core.changefeed.steps`` sends them;
``spark_jobs.apply_window`` runs them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, get_args

from cdc_core.changefeed.job_args.base import JobArgs, bool_arg, check_names, opt_ts, ts_arg
from cdc_core.schema.model import TableInfo

# A ``tables`` entry of apply_window: a TableInfo (or its JSON or dict), or {"table": <that>, "event_filters": [...]}.
TableEntry = TableInfo | str | Mapping[str, Any]
Writer = Literal["delta-rs", "delta-spark"]
WRITERS: tuple[Writer, ...] = get_args(Writer)


def _entry_json(entry: TableEntry) -> Any:
    if isinstance(entry, TableInfo):
        return entry.to_json()
    if isinstance(entry, Mapping) and isinstance(entry.get("table"), TableInfo):
        return {**entry, "table": entry["table"].to_json()}
    return entry


@dataclass(frozen=True, kw_only=True)
class ApplyArgs(JobArgs):
    """The ``apply_window`` job's arguments (``cdc_core.changefeed.steps`` sends them; see
    ``spark_jobs.apply_window.apply_window`` for what each means).

    :meth:`from_dict` raises ``ValueError`` naming the argument: a missing one, one the job does not know (a typo
    would otherwise be ignored), a ts that is not an integer, a writer that is not one of ``WRITERS``.
    """

    JOB: ClassVar[str] = "apply_window"

    sink_uri: str
    changefeed_id: str
    window_end_ts: int
    tables: tuple[TableEntry, ...]
    after_ts: int | None = None
    upto_ts: int | None = None
    version: int | None = None
    at_barrier: bool = False
    event_filters: Mapping[int | str, Sequence[Mapping[str, Any]]] | None = None
    ignore_txn_start_ts: tuple[int, ...] = ()
    writer: Writer | None = None
    ignore_moves: bool = False
    deletion_vectors: bool = False
    history: tuple[str, ...] = ()  # the tables (qualified names) with a history table ([sink] history)
    change_data_feed: bool = False

    @classmethod
    def from_dict(cls, args: Mapping[str, Any]) -> ApplyArgs:
        """``args`` as JSON gives them. ``checkpoint_ts`` is still read as ``after_ts`` when ``after_ts`` is absent
        (a whole-window run); ``barrier_ts`` is refused with what replaced it."""
        job = cls.JOB
        if "barrier_ts" in args:
            raise ValueError(f"{job} no longer takes barrier_ts: pass after_ts, upto_ts and version")
        check_names(job, args, {f.name for f in fields(cls)} | {"checkpoint_ts"},
                    ("sink_uri", "changefeed_id", "window_end_ts", "tables"))
        writer = args.get("writer")
        if writer is not None and writer not in WRITERS:
            raise ValueError(f"{job}: writer must be one of {list(WRITERS)}, got {writer!r}")
        return cls(
            sink_uri=str(args["sink_uri"]), changefeed_id=str(args["changefeed_id"]),
            window_end_ts=ts_arg(job, "window_end_ts", args["window_end_ts"]), tables=tuple(args["tables"]),
            after_ts=opt_ts(job, "after_ts", args["after_ts"]) if "after_ts" in args else
            opt_ts(job, "checkpoint_ts", args.get("checkpoint_ts")),
            upto_ts=opt_ts(job, "upto_ts", args.get("upto_ts")), version=opt_ts(job, "version", args.get("version")),
            at_barrier=bool_arg(job, "at_barrier", args.get("at_barrier", False)),
            event_filters=args.get("event_filters"),
            ignore_txn_start_ts=tuple(ts_arg(job, "ignore_txn_start_ts", t)
                                      for t in args.get("ignore_txn_start_ts") or ()),
            writer=writer, ignore_moves=bool(args.get("ignore_moves")),
            deletion_vectors=bool_arg(job, "deletion_vectors", args.get("deletion_vectors", False)),
            history=tuple(str(n) for n in args.get("history") or ()),
            change_data_feed=bool_arg(job, "change_data_feed", args.get("change_data_feed", False)),
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "sink_uri": self.sink_uri, "changefeed_id": self.changefeed_id, "window_end_ts": self.window_end_ts,
            "tables": [_entry_json(t) for t in self.tables], "after_ts": self.after_ts, "upto_ts": self.upto_ts,
            "version": self.version, "at_barrier": self.at_barrier,
            "event_filters": None if self.event_filters is None else
            {str(k): [dict(f) for f in v] for k, v in self.event_filters.items()},
            "ignore_txn_start_ts": list(self.ignore_txn_start_ts), "writer": self.writer,
            "ignore_moves": self.ignore_moves, "deletion_vectors": self.deletion_vectors,
            "history": list(self.history),
            "change_data_feed": self.change_data_feed,
        }  # fmt: skip
