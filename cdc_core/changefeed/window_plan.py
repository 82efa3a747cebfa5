"""The plan of one window: what ``tasks.plan`` fixes and the pull, apply, check and publish steps carry out.

A :class:`WindowPlan` crosses between Airflow tasks as XCom: :meth:`WindowPlan.to_xcom` gives its JSON, which
:meth:`WindowPlan.from_xcom` reads back, refusing a malformed one with a ``ChangefeedError`` naming the field.
A snapshot window carries a :class:`SnapshotPlan`, a rebuild window a :class:`RebuildPlan`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, get_args

from cdc_core.errors import ChangefeedError

WindowMode = Literal["incremental", "snapshot", "rebuild"]
MODES: tuple[WindowMode, ...] = get_args(WindowMode)

def _field(d: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str, *,
           default: Any = ..., check: Callable[[Any], bool] | None = None) -> Any:
    """``d[name]`` when it is a ``kind`` (a bool is not an int here) and passes ``check``; ``default`` when absent
    and one is given; else a ``ChangefeedError`` naming ``where`` and the field."""
    if name not in d:
        if default is ...:
            raise ChangefeedError(f"{where}: missing field {name!r}")
        return default
    v = d[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in kinds) or (check and not check(v)):
        raise ChangefeedError(f"{where}: field {name!r} is {v!r}")
    return v


def _object(d: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise ChangefeedError(f"{where}: must be an object, got {type(d).__name__}")
    return d


def _names(d: Mapping[str, Any], name: str, where: str) -> tuple[str, ...]:
    v = _field(d, name, (list, tuple), where)
    if not all(isinstance(n, str) for n in v):
        raise ChangefeedError(f"{where}: field {name!r} must be table names, got {v!r}")
    return tuple(v)


@dataclass(frozen=True)
class SnapshotPlan:
    """What a snapshot window loads: the tables (``db.table``) at ``ts`` (the checkpoint), by the snapshot ``id``
    (kept by a retry of the same snapshot); ``all_tables``: every replicated table; ``initial``: the changefeed's
    ``initial-snapshot``."""

    id: str
    ts: int
    tables: tuple[str, ...]
    all_tables: bool
    initial: bool

    @classmethod
    def from_xcom(cls, d: Any) -> SnapshotPlan:
        where = "window plan snapshot"
        d = _object(d, where)
        return cls(_field(d, "id", str, where), _field(d, "ts", int, where), _names(d, "tables", where),
                   _field(d, "all_tables", bool, where), _field(d, "initial", bool, where))

    def to_xcom(self) -> dict[str, Any]:
        return {**asdict(self), "tables": list(self.tables)}


@dataclass(frozen=True)
class RebuildPlan:
    """What a rebuild window rebuilds: the tables at ``ts`` (the checkpoint) by the rebuild ``id`` (a resumed one
    keeps its own), remembered by ``tag`` (a backfill's, once per backfill); ``noop``: already done, ``reason``
    says why; ``resume``: it finishes an unfinished rebuild."""

    id: str
    ts: int
    tag: str | None
    tables: tuple[str, ...]
    all_tables: bool
    noop: bool
    reason: str
    resume: bool

    @classmethod
    def from_xcom(cls, d: Any) -> RebuildPlan:
        where = "window plan rebuild"
        d = _object(d, where)
        return cls(_field(d, "id", str, where), _field(d, "ts", int, where),
                   _field(d, "tag", (str, type(None)), where), _names(d, "tables", where),
                   _field(d, "all_tables", bool, where), _field(d, "noop", bool, where),
                   _field(d, "reason", str, where), _field(d, "resume", bool, where))

    def to_xcom(self) -> dict[str, Any]:
        return {**asdict(self), "tables": list(self.tables)}


@dataclass(frozen=True, kw_only=True)
class WindowPlan:
    """One window ``(checkpoint_ts, target_ts]`` of a changefeed and what it does.

    ``skip``: nothing to do (``reason`` says why); ``mode``: what the window does (``initial-snapshot`` or an
    unfinished rebuild can make it differ from ``requested_mode``); ``tables``: the ``db.table`` names requested
    (None: every replicated table); ``run_tag``: an Airflow backfill's tag (a rebuild happens once per tag);
    ``has_window``: whether ``(checkpoint_ts, target_ts]`` is non-empty (when it is not, ``target_ts`` is the
    checkpoint and the window only snapshots / rebuilds and checks); ``full_check``: reconcile every replicated
    table whole at the window end too; ``lease_owner``: the Airflow run holding the window lease (None outside
    Airflow).
    """

    changefeed_id: str
    sink_uri: str
    checkpoint_ts: int
    target_ts: int
    skip: bool = False
    reason: str = ""
    mode: WindowMode = "incremental"
    requested_mode: WindowMode = "incremental"
    tables: tuple[str, ...] | None = None
    run_tag: str | None = None
    has_window: bool = True
    snapshot: SnapshotPlan | None = None
    rebuild: RebuildPlan | None = None
    full_check: bool = False
    lease_owner: str | None = None

    @classmethod
    def from_xcom(cls, d: Any) -> WindowPlan:
        """The plan in ``d`` (what :meth:`to_xcom` gave); a ``ChangefeedError`` naming the field that is missing or
        has another type."""
        where = "window plan"
        d = _object(d, where)
        checkpoint, target = _field(d, "checkpoint_ts", int, where), _field(d, "target_ts", int, where)
        tables = d.get("tables")
        sn, rb = d.get("snapshot"), d.get("rebuild")
        return cls(
            changefeed_id=_field(d, "changefeed_id", str, where), sink_uri=_field(d, "sink_uri", str, where),
            checkpoint_ts=checkpoint, target_ts=target, skip=_field(d, "skip", bool, where),
            reason=_field(d, "reason", str, where),
            mode=_field(d, "mode", str, where, default="incremental", check=MODES.__contains__),
            requested_mode=_field(d, "requested_mode", str, where, default="incremental", check=MODES.__contains__),
            tables=None if tables is None else _names(d, "tables", where),
            run_tag=_field(d, "run_tag", (str, type(None)), where, default=None),
            has_window=_field(d, "has_window", bool, where, default=target > checkpoint),
            snapshot=None if sn is None else SnapshotPlan.from_xcom(sn),
            rebuild=None if rb is None else RebuildPlan.from_xcom(rb),
            full_check=_field(d, "full_check", bool, where, default=False),
            lease_owner=_field(d, "lease_owner", (str, type(None)), where, default=None),
        )  # fmt: skip

    def to_xcom(self) -> dict[str, Any]:
        """The plan as JSON (what crosses between Airflow tasks and what ``cdcflow changefeed run`` prints)."""
        return {
            "changefeed_id": self.changefeed_id, "sink_uri": self.sink_uri, "checkpoint_ts": self.checkpoint_ts,
            "target_ts": self.target_ts, "skip": self.skip, "reason": self.reason, "mode": self.mode,
            "requested_mode": self.requested_mode, "tables": None if self.tables is None else list(self.tables),
            "run_tag": self.run_tag, "has_window": self.has_window,
            "snapshot": None if self.snapshot is None else self.snapshot.to_xcom(),
            "rebuild": None if self.rebuild is None else self.rebuild.to_xcom(),
            "full_check": self.full_check, "lease_owner": self.lease_owner,
        }  # fmt: skip

    def held_by(self, owner: str) -> WindowPlan:
        """This plan with its window lease held by ``owner``."""
        return replace(self, lease_owner=owner)
