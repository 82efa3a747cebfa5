"""Which Delta version of a silver table holds the changefeed at a ts: the versions table, and time travel by ts.

``<sink>/_cdcflow/versions`` (a Delta table, append-only, partitioned by ``changefeed_id``) holds one row per
(checkpoint ts, table) every time a changefeed's checkpoint moves after an apply -- a window's end, a sub-window's
end, a DDL barrier -- and at the checkpoint a snapshot load or a rebuild replaced tables at. A checkpoint's rows name
**every** table the changefeed replicates at it, touched or not: a reader finds each table's version at any
published checkpoint from that checkpoint's rows alone, and a table dropped before it has none (a "latest row at or
below" over touched tables only would still name it). The cost is one row per table per checkpoint, and one read of
each table's recent Delta history when the checkpoint moves.

A row says: at ``checkpoint_ts`` the Delta table at ``<sink>/<path>`` (its Delta ``metaData.id``: ``table_uuid``)
held, at ``version``, exactly the changes with commit ts ``<= checkpoint_ts`` (the checkpoint's contract,
ARCHITECTURE.md section 3). Several rows of one (checkpoint, table) may exist -- a window's and, later, a snapshot's
or rebuild's that replaced the table at that checkpoint -- and the one recorded last holds. ``after_ts`` is the
checkpoint the step started from, and ``first_change_ts`` the commit ts of the table's first change in
``(after_ts, checkpoint_ts]`` (a row event of the bronze changelog or a DDL job naming it; null: none): what decides
whether a ts between two checkpoints reads exactly (:func:`at`). Rows are written before the checkpoint advances and
only after the step's checks passed; a re-run of the same step (same changefeed, checkpoint and source) adds none.

Time travel by commit info (:func:`version_as_of`): every commit cdcflow makes carries its ``cdcflow.ts``
(``spark_jobs.load.delta_writer.commit_metadata``); the newest stamped version at or below a ts is the table as the
changefeed had it then. The versions table records exactly that version at each checkpoint, so a rollback, ``cdcflow
verify --at-ts`` and a reader of the versions table agree.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from cdc_core.codec.sink_uri import local_path, name_component
from cdc_core.errors import ChangefeedError

if TYPE_CHECKING:
    from deltalake import DeltaTable

SCHEMA = pa.schema([
    pa.field("changefeed_id", pa.string(), nullable=False),
    pa.field("checkpoint_ts", pa.int64(), nullable=False),
    pa.field("table", pa.string(), nullable=False),  # "db.table", the names at checkpoint_ts
    pa.field("path", pa.string(), nullable=False),  # the Delta table's directory under the sink at checkpoint_ts
    pa.field("version", pa.int64(), nullable=False),
    pa.field("table_uuid", pa.string(), nullable=False),  # Delta metaData.id: the table across renames
    pa.field("source", pa.string(), nullable=False),  # window | sub-window | ddl | snapshot <id> | rebuild <id>
    pa.field("after_ts", pa.int64(), nullable=False),
    pa.field("first_change_ts", pa.int64(), nullable=True),
    pa.field("recorded_at", pa.timestamp("us", tz="UTC"), nullable=False),
])

# the sources whose rows cover a step (after_ts, checkpoint_ts] of the changelog (a snapshot's or rebuild's rows
# replace tables at one ts: after_ts = checkpoint_ts)
STEP_SOURCES = ("window", "sub-window", "ddl")


def versions_path(sink_uri: str) -> str:
    return str(local_path(sink_uri) / "_cdcflow" / "versions")


def relative_path(db: str, table: str) -> str:
    """A silver table's directory under the sink (``sink_uri.table_path_of`` without the sink)."""
    return f"{name_component(db, database=True)}/{name_component(table)}"


# --- time travel by commit info ------------------------------------------------------------------------------------


def commit_ts(info: dict[str, Any]) -> int:
    """The cdcflow ts of a commit (an entry of ``DeltaTable.history()``); 0 for commits without one (creation).
    delta-rs writes the keys into ``commitInfo`` as they are, delta-spark as the JSON of ``commitInfo.userMetadata``
    (``spark_jobs.load.delta_writer.commit_metadata``)."""
    if info.get("cdcflow.ts") is not None:
        return int(info["cdcflow.ts"])
    meta = info.get("userMetadata")
    if isinstance(meta, str) and meta.startswith("{"):
        try:
            return int(json.loads(meta).get("cdcflow.ts") or 0)
        except (ValueError, AttributeError):
            return 0
    return 0


def _newest_stamped(history: Iterable[dict[str, Any]], ts: int) -> int | None:
    """The newest version of ``history`` (newest first) whose cdcflow ts is in ``(0, ts]``."""
    for info in history:
        at = commit_ts(info)
        if 0 < at <= ts:
            return int(info["version"])
    return None


def _before_first_stamp(history: Iterable[dict[str, Any]]) -> int | None:
    """The newest version before the first stamped commit of ``history`` (the table's creation), if any."""
    best = None
    for info in sorted(history, key=lambda h: int(h["version"])):
        if commit_ts(info) > 0:
            break
        best = int(info["version"])
    return best


def version_as_of(path: str | DeltaTable, ts: int) -> int | None:
    """The newest Delta version of ``path`` (or of an open table) whose cdcflow commit ts (:func:`commit_ts`) is
    ``<= ts`` -- the table as the changefeed had it at ``ts``. Every commit cdcflow makes carries its ts, but the
    table's creation: versions before the first stamped commit count as ts 0; an unstamped commit after it (an edit
    made outside cdcflow) is never the changefeed's state at any ts.

    The history is read newest first, a page at a time (16 commits, then four times more each time): the answer is
    the newest stamped commit at or before ``ts`` when there is one (a window's checks ask for the version of the
    window before, a commit or two back), so a table with a year of windows is not read back to its creation each
    time."""
    from deltalake import DeltaTable

    dt = DeltaTable(path) if isinstance(path, str) else path
    limit, seen = 16, -1
    while True:
        page = dt.history(limit)  # newest first; a commit without commit info is left out, so a page may be short
        found = _newest_stamped(page, ts)
        if found is not None:
            return found
        if len(page) <= seen:  # the whole history was read
            break
        seen, limit = len(page), limit * 4
    return None if ts < 0 else _before_first_stamp(page)


def versions_as_of(dt: DeltaTable, ts: Sequence[int]) -> dict[int, int | None]:
    """:func:`version_as_of` of each of ``ts``, from one read of the whole history (a rebuild re-records every
    checkpoint of a table it replayed)."""
    history = dt.history()
    out: dict[int, int | None] = {}
    for t in ts:
        found = _newest_stamped(history, t)
        out[t] = found if found is not None or t < 0 else _before_first_stamp(history)
    return out


# --- the versions table --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableVersion:
    """One table's row of a checkpoint (:func:`record`)."""

    table: str
    path: str
    version: int
    table_uuid: str
    first_change_ts: int | None = None


def exists(sink_uri: str) -> bool:
    from deltalake import DeltaTable

    return bool(DeltaTable.is_deltatable(versions_path(sink_uri)))


def read(sink_uri: str, changefeed_id: str) -> pa.Table:
    """Every row of ``changefeed_id`` (its partition), ordered by checkpoint then as recorded."""
    from deltalake import DeltaTable

    if not exists(sink_uri):
        return SCHEMA.empty_table()
    data = DeltaTable(versions_path(sink_uri)).to_pyarrow_table(filters=[("changefeed_id", "=", changefeed_id)])
    data = data.select(SCHEMA.names).cast(SCHEMA)
    return data.sort_by([("checkpoint_ts", "ascending"), ("recorded_at", "ascending")])


def recorded(sink_uri: str, changefeed_id: str, checkpoint_ts: int, source: str) -> bool:
    """Whether rows of (changefeed, checkpoint, source) were recorded already."""
    from deltalake import DeltaTable

    if not exists(sink_uri):
        return False
    dt = DeltaTable(versions_path(sink_uri))
    data = dt.to_pyarrow_table(columns=["checkpoint_ts", "source"],
                               filters=[("changefeed_id", "=", changefeed_id), ("checkpoint_ts", "=", checkpoint_ts),
                                        ("source", "=", source)])
    return bool(data.num_rows)


def record(sink_uri: str, changefeed_id: str, checkpoint_ts: int, source: str, tables: Sequence[TableVersion], *,
           after_ts: int) -> bool:
    """Append the rows of one checkpoint (one commit), unless (changefeed, checkpoint, source) has rows already (a
    re-run of the step); returns whether it wrote. A checkpoint without a Delta table writes nothing."""
    if not tables or recorded(sink_uri, changefeed_id, checkpoint_ts, source):
        return False
    return record_many(sink_uri, changefeed_id, source, {checkpoint_ts: (after_ts, tables)})


def record_many(sink_uri: str, changefeed_id: str, source: str,
                marks: Mapping[int, tuple[int, Sequence[TableVersion]]]) -> bool:
    """Append the rows of several checkpoints of one ``source`` (``{checkpoint_ts: (after_ts, tables)}``) in one
    commit, leaving out the checkpoints that have rows of ``source`` already; returns whether it wrote."""
    from deltalake import write_deltalake

    done = {int(r["checkpoint_ts"]) for r in read(sink_uri, changefeed_id).to_pylist() if r["source"] == source}
    now = int(time.time() * 1_000_000)
    rows = [{"changefeed_id": changefeed_id, "checkpoint_ts": ts, "table": t.table, "path": t.path,
             "version": t.version, "table_uuid": t.table_uuid, "source": source, "after_ts": after_ts,
             "first_change_ts": t.first_change_ts, "recorded_at": now}
            for ts, (after_ts, tables) in sorted(marks.items()) if ts not in done for t in tables]
    if not rows:
        return False
    # delta-rs retries an append whose log version another writer's commit took (two changefeeds on one sink): blind
    # appends do not conflict (delta-rs ``crates/core/src/operations/transaction/conflict_checker.rs``).
    write_deltalake(versions_path(sink_uri), pa.Table.from_pylist(rows, schema=SCHEMA), mode="append",
                    partition_by=["changefeed_id"])
    return True


def checkpoints(sink_uri: str, changefeed_id: str) -> list[int]:
    """The checkpoints with rows, ascending."""
    data = read(sink_uri, changefeed_id)
    return sorted({int(v) for v in pc.unique(data.column("checkpoint_ts")).to_pylist()})


@dataclass(frozen=True)
class TableAt:
    """A table's version at a ts (:func:`at`)."""

    table: str
    path: str  # under the sink
    version: int
    table_uuid: str
    source: str
    exact: bool
    first_change_ts: int | None  # the table's first change after the checkpoint, when known


@dataclass(frozen=True)
class SnapshotAt:
    """Every table's version at ``ts``: the rows of ``checkpoint_ts``, the greatest checkpoint ``<= ts``."""

    changefeed_id: str
    ts: int
    checkpoint_ts: int
    next_checkpoint_ts: int | None
    exact: bool
    tables: dict[str, TableAt]

    def to_json(self) -> dict[str, Any]:
        return {"changefeed_id": self.changefeed_id, "at_ts": self.ts, "checkpoint_ts": self.checkpoint_ts,
                "next_checkpoint_ts": self.next_checkpoint_ts, "exact": self.exact,
                "tables": {n: {"path": t.path, "version": t.version, "table_uuid": t.table_uuid,
                               "source": t.source, "exact": t.exact, "first_change_ts": t.first_change_ts}
                           for n, t in sorted(self.tables.items())}}


def _latest_per_table(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["recorded_at"]):
        out[r["table"]] = r  # the one recorded last holds
    return out


def at(sink_uri: str, changefeed_id: str, ts: int) -> SnapshotAt:
    """Every table's Delta version holding the changes with commit ts ``<= ts``: the latest row of each table at
    the greatest checkpoint ``C <= ts``. A table is ``exact`` when no change of it committed in ``(C, ts]``: ``ts ==
    C``, or the next checkpoint's row of the table (matched by ``table_uuid``: a RENAME keeps it) covers ``(C, ...]``
    (``after_ts <= C``) with its first change after ``ts``; a table without a row there left the changefeed at that
    checkpoint (its DROP or RENAME is a DDL barrier, so it committed after ``ts``). After the last checkpoint nothing
    is known of ``(C, ts]``: exact only at ``C``. ``ChangefeedError`` when ``ts`` is before the first checkpoint."""
    data = read(sink_uri, changefeed_id).to_pylist()
    if not data:
        raise ChangefeedError(f"changefeed {changefeed_id!r} has no versions recorded in {versions_path(sink_uri)} "
                              "(no window published since the versions table exists)")
    marks = sorted({int(r["checkpoint_ts"]) for r in data})
    below = [c for c in marks if c <= ts]
    if not below:
        raise ChangefeedError(f"ts {ts} is before the oldest recorded checkpoint {marks[0]} of changefeed "
                              f"{changefeed_id!r}: no Delta version holds the changefeed then")
    c = below[-1]
    nxt = next((m for m in marks if m > ts), None)
    here = _latest_per_table([r for r in data if r["checkpoint_ts"] == c])
    steps = [r for r in data if nxt is not None and r["checkpoint_ts"] == nxt and r["source"] in STEP_SOURCES]
    by_uuid: dict[str, list[dict[str, Any]]] = {}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for r in steps:
        by_uuid.setdefault(r["table_uuid"], []).append(r)
        by_name.setdefault(r["table"], []).append(r)
    tables: dict[str, TableAt] = {}
    matched: set[int] = set()
    for name, r in here.items():
        first: int | None = None
        if ts == c:
            exact = True
        elif nxt is None:
            exact = False
        else:
            # the table at the next checkpoint: the same Delta table (a RENAME keeps its uuid), else the same name
            # (a rebuild gives the table a new Delta table under its name)
            follow = by_uuid.get(r["table_uuid"]) or by_name.get(name) or []
            matched.update(id(f) for f in follow)
            covering = [f for f in follow if f["after_ts"] <= c]
            firsts = [f["first_change_ts"] for f in covering if f["first_change_ts"] is not None]
            first = min(firsts) if firsts else None
            exact = not follow or (bool(covering) and (first is None or first > ts))
        tables[name] = TableAt(name, r["path"], int(r["version"]), r["table_uuid"], r["source"], exact, first)
    # A table first recorded at the next checkpoint (created in (C, next]) had no version at C: exact only when it
    # came after ts.
    created = [f for f in steps if id(f) not in matched]
    exact = ts == c or (all(t.exact for t in tables.values()) and all(
        f["first_change_ts"] is not None and f["first_change_ts"] > ts for f in created))
    return SnapshotAt(changefeed_id, ts, c, nxt, exact, tables)
