"""A local Delta table's log, read and written directly where delta-rs's API stops short: the live ``add`` actions
with their deletion-vector descriptors (``DeltaTable.get_add_actions`` leaves those out, and a ``remove`` must name
the descriptor of the ``add`` it removes), and a commit of hand-made actions (delta-rs commits no deletion vector).

Log replay follows Delta's protocol (``PROTOCOL.md``, "Action Reconciliation"): the last checkpoint named by
``_last_checkpoint`` (one or several parquet parts), then each ``NNN.json`` after it; a file is known by
``(path, deletion vector uniqueId)``; a ``remove`` ends the ``add`` of the same key. A commit is put only if absent
(a hard link of a complete temporary file, as delta-rs's local store does), so a concurrent writer's commit of the
same version is never overwritten: the loser gets :class:`CommitConflict`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

from spark_jobs.load.deletion_vector import Descriptor

_COMMIT = re.compile(r"^(\d{20})\.json$")


class CommitConflict(Exception):
    """Another writer committed the version this commit was made for."""


def log_dir(table_dir: str) -> str:
    return os.path.join(table_dir, "_delta_log")


FileKey = tuple[str, str | None]  # (path, deletion vector uniqueId): what an add or remove names


def file_key(add: dict[str, Any]) -> FileKey:
    dv = add.get("deletionVector")
    return add["path"], None if not dv else Descriptor.from_json(dv).unique_id


def _checkpoint(table_dir: str, version: int) -> tuple[int, list[str]]:
    """The newest checkpoint at or before ``version``: its version and part files (-1, [] when none)."""
    try:
        with open(os.path.join(log_dir(table_dir), "_last_checkpoint")) as f:
            last = json.load(f)
    except (FileNotFoundError, ValueError):
        return -1, []
    v = int(last["version"])
    if v > version:
        return -1, []  # an older version than the last checkpoint: replay from the start
    parts = last.get("parts")
    if parts:
        names = [f"{v:020}.checkpoint.{i:010}.{int(parts):010}.parquet" for i in range(1, int(parts) + 1)]
    else:
        names = [f"{v:020}.checkpoint.parquet"]
    return v, [os.path.join(log_dir(table_dir), n) for n in names]


def _checkpoint_actions(paths: Sequence[str], kind: str) -> Iterator[dict[str, Any]]:
    """The ``kind`` actions (``add`` or ``remove``, a tombstone) of a checkpoint's parts, as a JSON commit has them."""
    import pyarrow.parquet as pq

    for path in paths:
        part = pq.ParquetFile(path)
        if kind not in part.schema_arrow.names:  # a writer may leave out a column no action of its fills
            continue
        for batch in part.iter_batches(columns=[kind]):
            for action in batch.column(0).to_pylist():
                if action is not None:
                    if "partitionValues" in action:
                        action["partitionValues"] = dict(action.get("partitionValues") or [])
                    if action.get("tags") is not None:
                        action["tags"] = dict(action["tags"])
                    yield {k: v for k, v in action.items() if v is not None}


def replay(table_dir: str, version: int) -> tuple[dict[FileKey, dict[str, Any]], dict[FileKey, dict[str, Any]]]:
    """The ``add`` actions live at ``version`` and the tombstones the log still holds (``remove`` actions of files
    not added again since, each with its ``deletionTimestamp``), by file key; each as the log has it (stats a JSON
    string). A checkpoint keeps the tombstones younger than ``delta.deletedFileRetentionDuration`` (PROTOCOL.md,
    "Checkpoints"): older ones are gone from both."""
    start, parts = _checkpoint(table_dir, version)
    live = {file_key(a): a for a in _checkpoint_actions(parts, "add")}
    removed = {file_key(r): r for r in _checkpoint_actions(parts, "remove")}
    for v in range(start + 1, version + 1):
        path = os.path.join(log_dir(table_dir), f"{v:020}.json")
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                action = json.loads(line)
                if "add" in action:
                    key = file_key(action["add"])
                    live[key] = action["add"]
                    removed.pop(key, None)
                elif "remove" in action:
                    key = file_key(action["remove"])
                    live.pop(key, None)
                    removed[key] = action["remove"]
    return live, removed


def live_adds(table_dir: str, version: int) -> dict[FileKey, dict[str, Any]]:
    """The ``add`` actions live at ``version``, by file key (:func:`replay`)."""
    return replay(table_dir, version)[0]


def commit(table_dir: str, version: int, actions: Sequence[dict[str, Any]]) -> None:
    """Write ``actions`` as commit ``version``, only if no commit of that version exists."""
    target = os.path.join(log_dir(table_dir), f"{version:020}.json")
    body = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
    fd, tmp = tempfile.mkstemp(prefix=f".{version:020}.", suffix=".json.tmp", dir=log_dir(table_dir))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, target)
        except FileExistsError:
            raise CommitConflict(f"{target}: another writer committed version {version}") from None
    finally:
        os.unlink(tmp)


def commit_info(operation: str, read_version: int, extra: dict[str, Any]) -> dict[str, Any]:
    return {"commitInfo": {"timestamp": int(time.time() * 1000), "operation": operation,
                           "operationParameters": {}, "readVersion": read_version,
                           "isBlindAppend": False, "clientVersion": "cdcflow", **extra}}
