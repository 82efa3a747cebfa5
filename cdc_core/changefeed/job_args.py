"""The arguments of cdcflow's Spark jobs: one class per job, owned by the engine that sends them.

Each class names its job (``JOB``, the key of ``spark_engine.JOBS``), refuses bad values when read from JSON
(:meth:`JobArgs.from_dict`; the ``ValueError`` names the job and the argument) and turns back into that JSON
(:meth:`JobArgs.to_dict`): the local engine hands a job the object, the submit engine sends its JSON to
``spark_jobs.job_server``, which rebuilds it with :func:`from_job_dict`. ``spark_jobs`` imports these classes;
nothing here imports ``spark_jobs``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, cast, get_args

from cdc_core.changefeed.config import DQ_MODES, DqMode, is_dq_mode
from cdc_core.errors import ChangefeedError
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import TableInfo

# --- the checks every job makes of its JSON ----------------------------------------------------------------------


def check_names(job: str, args: Mapping[str, Any], known: Iterable[str], required: Iterable[str]) -> None:
    """Refuse what ``job``'s JSON arguments ``args`` name wrong: one the job does not take (``known``; a typo would
    otherwise be ignored), or a ``required`` one missing or null. The ``ValueError`` names them."""
    names = set(known)
    unknown = sorted(set(args) - names)
    if unknown:
        raise ValueError(f"{job}: unknown argument(s) {unknown}; it takes {sorted(names)}")
    missing = [k for k in required if args.get(k) is None]
    if missing:
        raise ValueError(f"{job}: missing argument(s) {missing}")


def table_arg(v: Any) -> TableInfo:
    """A table argument: ``TableInfo`` JSON, its dict, or a ``TableInfo`` already."""
    if isinstance(v, TableInfo):
        return v
    return TableInfo.from_json(v) if isinstance(v, str | bytes) else TableInfo.from_dict(dict(v))


def table_entries(job: str, entries: Iterable[Any]) -> tuple[tuple[TableInfo, bool], ...]:
    """The checks' table arguments, each ``{"table": <table_arg>, "content": <bool, default true>}``: the tables
    with whether their content is checked; a ``ValueError`` naming ``job`` and the entry when one has another
    shape."""
    out = []
    for i, entry in enumerate(entries):
        t = entry.get("table") if isinstance(entry, Mapping) else None
        if t is None:
            raise ValueError(f"{job}: tables[{i}] must be {{\"table\": ..., \"content\": ...}}, got {entry!r}")
        out.append((table_arg(t), bool(entry.get("content", True))))
    return tuple(out)


def ts_arg(job: str, name: str, v: Any) -> int:
    """The integer ts argument ``name`` of ``job`` (JSON gives it as a number or, past 2**53, a string); a
    ``ValueError`` naming both when it is neither."""
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise ValueError(f"{job}: {name} must be an integer ts, got {v!r}")
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"{job}: {name} must be an integer ts, got {v!r}") from None


def _opt_ts(job: str, name: str, v: Any) -> int | None:
    return None if v is None else ts_arg(job, name, v)


def _bool_arg(job: str, name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{job}: {name} must be true or false, got {v!r}")
    return v


def _entries_json(tables: Iterable[tuple[TableInfo, bool]]) -> list[dict[str, Any]]:
    return [{"table": t.to_json(), "content": c} for t, c in tables]


def check_mode(mode: str) -> None:
    """Refuse a data-quality mode not in ``DQ_MODES`` (the ``ValueError`` names them)."""
    if not is_dq_mode(mode):
        raise ValueError(f"data-quality mode must be one of {DQ_MODES}, got {mode!r}")


def check_dq(mode: str, content: bool, pd_addr: str | None) -> None:
    """Refuse checks that cannot run: a mode not in ``DQ_MODES``, or content to compare without the upstream."""
    check_mode(mode)
    if mode != "off" and content and pd_addr is None:
        raise ValueError("the changed-key checks need the upstream (pd_addr)")


class JobArgs(ABC):
    """One Spark job's arguments: ``JOB`` names the job; the object crosses to the job as itself (local engine) or
    as :meth:`to_dict`'s JSON, which :meth:`from_dict` reads back (submit engine)."""

    JOB: ClassVar[str]

    @classmethod
    @abstractmethod
    def from_dict(cls, args: Mapping[str, Any]) -> JobArgs:
        """The arguments as JSON gives them; a ``ValueError`` naming the job and the argument when one is bad."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """The JSON :meth:`from_dict` reads back into an equal object."""


# --- apply_window --------------------------------------------------------------------------------------------------

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
            after_ts=_opt_ts(job, "after_ts", args["after_ts"]) if "after_ts" in args else
            _opt_ts(job, "checkpoint_ts", args.get("checkpoint_ts")),
            upto_ts=_opt_ts(job, "upto_ts", args.get("upto_ts")), version=_opt_ts(job, "version", args.get("version")),
            at_barrier=_bool_arg(job, "at_barrier", args.get("at_barrier", False)),
            event_filters=args.get("event_filters"),
            ignore_txn_start_ts=tuple(ts_arg(job, "ignore_txn_start_ts", t)
                                      for t in args.get("ignore_txn_start_ts") or ()),
            writer=writer, ignore_moves=bool(args.get("ignore_moves")),
            deletion_vectors=_bool_arg(job, "deletion_vectors", args.get("deletion_vectors", False)),
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
        }  # fmt: skip


# --- ddl_apply -----------------------------------------------------------------------------------------------------


def _info(v: Any) -> TableInfo | None:
    return None if v is None else table_arg(v)


def _need_info(v: Any, which: str) -> TableInfo:
    info = _info(v)
    if info is None:
        raise ChangefeedError(f"ddl_apply: exchange argument {which!r} is missing")
    return info


def _ddl_job(v: Any) -> DDLJob:
    if isinstance(v, DDLJob):
        return v
    return DDLJob.from_row(json.loads(v) if isinstance(v, str | bytes) else dict(v))


@dataclass(frozen=True)
class Upstream:
    """Where the upstream's rows are read at the barrier, for the jobs that need them (a re-key by _tidb_rowid)."""

    pd_addr: str
    tidb: str | None = None

    @classmethod
    def from_args(cls, d: Mapping[str, Any]) -> Upstream:
        check_names("ddl_apply upstream", d, ("pd_addr", "tidb"), ("pd_addr",))
        return cls(str(d["pd_addr"]), d.get("tidb"))

    def to_dict(self) -> dict[str, Any]:
        return {"pd_addr": self.pd_addr, "tidb": self.tidb}


@dataclass(frozen=True)
class Exchange:
    """The other side of an EXCHANGE PARTITION: the normal table just before and after the job (by its upstream
    names), the table whose names give its Delta path, whether it is replicated, and where the upstream is."""

    normal_before: TableInfo
    normal_after: TableInfo
    normal_target: TableInfo
    replicate_normal: bool
    pd_addr: str
    tidb: str | None = None

    @classmethod
    def from_args(cls, d: Mapping[str, Any]) -> Exchange:
        after = _need_info(d.get("normal_after"), "normal_after")
        return cls(_need_info(d.get("normal_before"), "normal_before"), after,
                   _info(d.get("normal_target")) or after, bool(d.get("replicate_normal")), str(d["pd_addr"]),
                   d.get("tidb"))

    def to_dict(self) -> dict[str, Any]:
        return {"normal_before": self.normal_before.to_json(), "normal_after": self.normal_after.to_json(),
                "normal_target": self.normal_target.to_json(), "replicate_normal": self.replicate_normal,
                "pd_addr": self.pd_addr, "tidb": self.tidb}


@dataclass(frozen=True)
class DdlApplyArgs(JobArgs):
    """The ``ddl_apply`` job's arguments (``cdc_core.changefeed.steps`` sends them): the DDL ``job``, its table
    just ``before`` and ``after`` it (None where there is none), for EXCHANGE PARTITION ``exchange``, for a re-key
    by _tidb_rowid ``upstream``. See ``spark_jobs.ddl_apply.apply_ddl``.

    :meth:`from_dict` raises ``ValueError`` naming the argument: a missing one, one the job does not know."""

    JOB: ClassVar[str] = "ddl_apply"

    sink_uri: str
    changefeed_id: str
    job: DDLJob
    before: TableInfo | None = None
    after: TableInfo | None = None
    exchange: Exchange | None = None
    upstream: Upstream | None = None

    @classmethod
    def from_dict(cls, args: Mapping[str, Any]) -> DdlApplyArgs:
        """``args`` as JSON gives them: ``job`` as ``DDLJob.to_json()``, table infos as JSON (or null)."""
        check_names(cls.JOB, args, [f.name for f in fields(cls)], ("sink_uri", "changefeed_id", "job"))
        ex, up = args.get("exchange"), args.get("upstream")
        return cls(str(args["sink_uri"]), str(args["changefeed_id"]), _ddl_job(args["job"]),
                   _info(args.get("before")), _info(args.get("after")), Exchange.from_args(ex) if ex else None,
                   Upstream.from_args(up) if up else None)

    def to_dict(self) -> dict[str, Any]:
        return {"sink_uri": self.sink_uri, "changefeed_id": self.changefeed_id, "job": self.job.to_json(),
                "before": self.before.to_json() if self.before else None,
                "after": self.after.to_json() if self.after else None,
                "exchange": self.exchange.to_dict() if self.exchange else None,
                "upstream": self.upstream.to_dict() if self.upstream else None}


# --- the checks ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowChecksArgs(JobArgs):
    """The ``window_checks`` job's arguments, checked when built (``cdc_core.changefeed.tasks`` sends them).

    ``tables`` are the tables to check, each with whether its content is (False: event filters drop its rows on
    purpose, so only its structure is); their changed keys are those of the bronze window ``window_end_ts`` with
    ``after_ts < commit_ts <= ts``, checked at ``ts``. ``pd_addr`` is the upstream's PD, needed unless the mode is
    "off" or no table's content is checked; ``tidb`` its SQL addresses (default: those registered in PD).

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

    def __post_init__(self) -> None:
        check_dq(self.mode, any(c for _, c in self.tables), self.pd_addr)

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
                   mode=args.get("mode", "checksum"), pd_addr=args.get("pd_addr"), tidb=args.get("tidb"))

    def to_dict(self) -> dict[str, Any]:
        return {"sink_uri": self.sink_uri, "changefeed_id": self.changefeed_id, "window_end_ts": self.window_end_ts,
                "tables": _entries_json(self.tables), "after_ts": self.after_ts, "ts": self.ts, "mode": self.mode,
                "pd_addr": self.pd_addr, "tidb": self.tidb}

    @property
    def reads_upstream(self) -> bool:
        """Whether the checks read the upstream: a mode other than "off" and a table whose content is checked."""
        return self.mode != "off" and self.pd_addr is not None and any(c for _, c in self.tables)

    def key(self) -> str:
        """The arguments as one string: what a read ahead for this job is found by
        (``spark_jobs.check_read_ahead``)."""
        return json.dumps([self.sink_uri, self.changefeed_id, self.window_end_ts, self.after_ts, self.ts, self.mode,
                           self.pd_addr, self.tidb, [(t.to_json(), c) for t, c in self.tables]])


@dataclass(frozen=True)
class ReadAheadArgs(WindowChecksArgs):
    """The ``window_checks_read_ahead`` job's arguments: those of the ``window_checks`` job it reads ahead for."""

    JOB: ClassVar[str] = "window_checks_read_ahead"

    @classmethod
    def ahead_of(cls, checks: WindowChecksArgs) -> ReadAheadArgs:
        """The read ahead for the ``window_checks`` job of ``checks``."""
        return cls(**{f.name: getattr(checks, f.name) for f in fields(checks)})


@dataclass(frozen=True)
class ReconcileArgs(JobArgs):
    """The ``data_quality`` job's arguments, checked when built (``cdc_core.changefeed.reconcile`` and ``tasks``
    send them; ``spark_jobs.data_quality.run_checks`` says what each check does).

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
                   as_of_ts=_opt_ts(job, "as_of_ts", args.get("as_of_ts")),
                   pd_addr=args.get("pd_addr"), tidb=args.get("tidb"), expected_rows=args.get("expected_rows"),
                   single=single)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sink_uri": self.sink_uri, "ts": self.ts, "mode": self.mode, "as_of_ts": self.as_of_ts,
                               "pd_addr": self.pd_addr, "tidb": self.tidb, "expected_rows": self.expected_rows}
        if self.single:
            (table, content), = self.tables
            return {**out, "table": table.to_json(), "content": content}
        return {**out, "tables": _entries_json(self.tables)}


# --- snapshot_load -------------------------------------------------------------------------------------------------

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

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table.to_json(), "base": self.base, "version": self.version, "load_id": self.load_id}


_REQUIRED = {"fetch": ("sink_uri", "changefeed_id", "pd_addr", "ts", "tables"),
             "load": ("sink_uri", "changefeed_id", "loads"),
             "fold": ("sink_uri", "changefeed_id", "ts", "tables")}
_OPTIONAL = {"fetch": ("tidb", "max_chunks"), "load": (), "fold": ()}
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
            check_names(f"{job} loads[{i}]", item, _LOAD_KEYS, _LOAD_KEYS)
            loads.append(BaseLoad(table_arg(item["table"]), str(item["base"]),
                                  ts_arg(job, f"loads[{i}].version", item["version"]), str(item["load_id"])))
        return cls(phase=cast(SnapshotPhase, phase), sink_uri=str(args["sink_uri"]),
                   changefeed_id=str(args["changefeed_id"]),
                   ts=ts_arg(job, "ts", args["ts"]) if "ts" in args else None,
                   tables=tuple(table_arg(x) for x in args.get("tables") or ()),
                   pd_addr=args.get("pd_addr"), tidb=args.get("tidb"),
                   max_chunks=_max_chunks(job, args.get("max_chunks")), loads=tuple(loads))

    def to_dict(self) -> dict[str, Any]:
        every: dict[str, Any] = {"phase": self.phase, "sink_uri": self.sink_uri, "changefeed_id": self.changefeed_id,
                                 "ts": self.ts, "tables": [t.to_json() for t in self.tables],
                                 "pd_addr": self.pd_addr, "tidb": self.tidb, "max_chunks": self.max_chunks,
                                 "loads": [b.to_dict() for b in self.loads]}
        return {k: every[k] for k in ("phase", *_REQUIRED[self.phase], *_OPTIONAL[self.phase])}


def _max_chunks(job: str, v: Any) -> int:
    if v is None:
        return DEFAULT_MAX_CHUNKS
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{job}: max_chunks must be a positive integer, got {v!r}")
    return v


# --- rollback ------------------------------------------------------------------------------------------------------


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


# --- maintain ------------------------------------------------------------------------------------------------------


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
                   enforce_retention_duration=_bool_arg(job, "enforce_retention_duration",
                                                        args.get("enforce_retention_duration", True)),
                   checkpoint=_bool_arg(job, "checkpoint", args.get("checkpoint", False)))

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "retention_hours": self.retention_hours,
                "enforce_retention_duration": self.enforce_retention_duration, "checkpoint": self.checkpoint}


# --- by job name ---------------------------------------------------------------------------------------------------

ARGS: dict[str, type[JobArgs]] = {cls.JOB: cls for cls in (
    ApplyArgs, DdlApplyArgs, WindowChecksArgs, ReadAheadArgs, ReconcileArgs, SnapshotJobArgs, RollbackArgs,
    MaintainArgs)}


def from_job_dict(job: str, args: Mapping[str, Any]) -> JobArgs:
    """The arguments of the job named ``job`` from their JSON (what the job server is sent)."""
    cls = ARGS.get(job)
    if cls is None:
        raise ChangefeedError(f"unknown Spark job {job!r}")
    return cls.from_dict(args)
