"""Which Delta table features of the sink's tables cdcflow's own commits honour, and the refusal of a table that uses
another (at ``changefeed create`` for the tables already in the sink, and before every hand-made commit).

cdcflow writes some commits by hand (``delta_log.commit``): the deletion-vector MERGE, its window-file compaction
and the purge of hollowed-out files (``merge_on_read``). Delta's protocol (PROTOCOL.md, "Table Features") binds a
writer to every feature a table's protocol names: one it does not implement, it must not write to. delta-rs and
delta-spark check that for their own commits (delta-rs refuses a MERGE's removes on an ``appendOnly`` table and
writes change data when the feed is on); the hand-made commits check it here, before they read anything.

A feature is judged by what it asks of a writer of these commits:

- honoured: ``deletionVectors`` (what they write), ``changeDataFeed`` (the MERGE writes its change data,
  ``spark_jobs.load.change_data``; the compaction and the purge change no data), ``timestampNtz`` (a type),
  ``domainMetadata`` and ``vacuumProtocolCheck`` (nothing for a data commit to do);
- honoured while inactive: ``appendOnly`` (a MERGE removes rows), ``invariants``, ``checkConstraints``,
  ``generatedColumns``, ``identityColumns`` (values a writer must check or compute), ``columnMapping`` (physical
  column names), ``inCommitTimestamp`` (a timestamp the commit must carry first), ``variantType`` (a type whose
  values cdcflow never writes; delta-rs names it in every protocol it upgrades) -- each present in the protocol and
  off in the table's properties and schema is fine;
- refused whenever named: ``rowTracking`` (row ids every new file must be given), ``v2Checkpoint`` (checkpoints the
  log replay does not read), ``typeWidening``, ``clustering``, ``icebergCompat*`` and any feature not listed here.

Legacy protocols (writer version < 7) name their features by version: 2 ``appendOnly`` and ``invariants``, 3
``checkConstraints``, 4 ``changeDataFeed`` and ``generatedColumns``, 5 ``columnMapping``, 6 ``identityColumns``.
"""

from __future__ import annotations

import json
from typing import Any

from cdc_core.errors import ChangefeedError

HONOURED = frozenset({"deletionVectors", "changeDataFeed", "timestampNtz", "domainMetadata", "vacuumProtocolCheck"})
# the writer version that implies each legacy feature (PROTOCOL.md, "Writer Version Requirements")
LEGACY_WRITER_FEATURES = {2: ("appendOnly", "invariants"), 3: ("checkConstraints",),
                          4: ("changeDataFeed", "generatedColumns"), 5: ("columnMapping",), 6: ("identityColumns",)}


def protocol_features(dt: Any) -> set[str]:
    """The writer features the protocol of ``dt`` (a ``deltalake.DeltaTable``) names, explicitly or by version."""
    p = dt.protocol()
    names = set(p.writer_features or []) | set(p.reader_features or [])
    for version, implied in LEGACY_WRITER_FEATURES.items():
        if p.min_writer_version >= version and p.min_writer_version < 7:
            names.update(implied)
    return names


def _true(conf: dict[str, str], key: str) -> bool:
    return str(conf.get(key, "false")).strip().lower() == "true"


def _fields(dt: Any) -> list[dict[str, Any]]:
    return list(json.loads(dt.schema().to_json()).get("fields", []))


def _active(feature: str, conf: dict[str, str], fields: list[dict[str, Any]]) -> str | None:
    """Why ``feature`` binds these commits on this table (None: it asks nothing of them here)."""
    def columns_with(key: str) -> list[str]:
        return [f["name"] for f in fields if any(k.startswith(key) for k in f.get("metadata") or {})]

    if feature in HONOURED:
        return None
    if feature == "appendOnly":
        return "delta.appendOnly = true: a MERGE removes rows" if _true(conf, "delta.appendOnly") else None
    if feature == "inCommitTimestamp":
        return ("delta.enableInCommitTimestamps = true: every commit must carry its timestamp"
                if _true(conf, "delta.enableInCommitTimestamps") else None)
    if feature == "columnMapping":
        mode = conf.get("delta.columnMapping.mode", "none")
        return None if mode in ("none", "", None) else f"delta.columnMapping.mode = {mode}: columns have physical names"
    if feature == "variantType":
        cols = [f["name"] for f in fields if "variant" in json.dumps(f.get("type"))]
        return f"VARIANT columns {cols}" if cols else None
    if feature == "checkConstraints":
        names = sorted(k.removeprefix("delta.constraints.") for k in conf if k.startswith("delta.constraints."))
        return f"CHECK constraints {names}" if names else None
    for feat, key, what in (("invariants", "delta.invariants", "invariants"),
                            ("generatedColumns", "delta.generationExpression", "generated columns"),
                            ("identityColumns", "delta.identity.", "identity columns")):
        if feature == feat:
            cols = columns_with(key)
            return f"{what} {cols}" if cols else None
    return "not implemented by cdcflow's hand-made commits"


# what a commit that changes no row (``dataChange`` false: a rewrite of the same rows) does not owe
NO_DATA_CHANGE_EXEMPT = frozenset({"appendOnly"})


def unsupported(dt: Any, *, data_change: bool = True) -> list[str]:
    """``feature (why)`` for each feature of ``dt``'s protocol that binds cdcflow's hand-made commits, sorted;
    ``data_change=False``: for a commit that rewrites the same rows, which appends nothing and owes no change
    data (PROTOCOL.md: change data files are for ``dataChange`` actions)."""
    conf = dict(dt.metadata().configuration or {})
    fields = _fields(dt)
    out = []
    for feature in sorted(protocol_features(dt)):
        if not data_change and feature in NO_DATA_CHANGE_EXEMPT:
            continue
        why = _active(feature, conf, fields)
        if why is not None:
            out.append(f"{feature} ({why})")
    return out


def check_writable(dt: Any, path: str, what: str = "the deletion-vector writer", *, data_change: bool = True) -> None:
    """Raise a ``ChangefeedError`` naming ``path`` and each feature of :func:`unsupported`: ``what`` would write
    commits that break them."""
    found = unsupported(dt, data_change=data_change)
    if found:
        raise ChangefeedError(
            f"silver table {path} uses Delta table feature(s) {what} does not write: {'; '.join(found)} -- turn "
            f"them off on the table, or set [sink] deletion-vectors = false (delta-rs's and delta-spark's own "
            f"MERGE honour them)")


def check_sink_tables(paths: list[str]) -> None:
    """:func:`check_writable` for each of ``paths`` that is a Delta table already (``changefeed create`` with
    deletion vectors on: a silver table a user gave a feature before the changefeed wrote to it)."""
    from deltalake import DeltaTable

    for path in paths:
        if DeltaTable.is_deltatable(path):
            check_writable(DeltaTable(path), path)
