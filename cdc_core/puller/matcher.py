"""Matches a region's PREWRITE and COMMIT rows into committed row changes, as TiKV clients must.

COMMITTED rows (from the incremental scan) pass through; PREWRITE rows are cached by
``(key, start_ts)``; a COMMIT takes its cached prewrite; a COMMIT whose prewrite is not cached yet
is held until the region is INITIALIZED (the scan may still deliver the lock); ROLLBACK drops the
prewrite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from cdc_core.errors import ChangefeedError
from cdc_core.proto import cdcpb_pb2

LogType = cdcpb_pb2.Event.LogType
OpType = cdcpb_pb2.Event.Row.OpType
# Plain ints: attribute lookups on protobuf enum wrappers are slow on a per-row path.
_PUT = int(OpType.PUT)
_DELETE = int(OpType.DELETE)
_OP_NAMES = {_PUT: "put", _DELETE: "delete"}


class RowChange(NamedTuple):
    """One committed row change. A NamedTuple: built once per pulled row, so construction must be cheap."""

    region_id: int
    key: bytes
    op: str  # "put" | "delete"
    start_ts: int
    commit_ts: int
    value: bytes | None
    old_value: bytes | None


@dataclass(slots=True)
class _Prewrite:
    op: int
    value: bytes
    old_value: bytes


def _op_name(op: int, where: str) -> str:
    if op == _PUT:
        return "put"
    if op == _DELETE:
        return "delete"
    raise ChangefeedError(f"{where}: corrupt event: unknown op type {op}")


class Matcher:
    def __init__(self, region_id: int) -> None:
        self.region_id = region_id
        self._prewrites: dict[tuple[bytes, int], _Prewrite] = {}
        self._held_commits: list[cdcpb_pb2.Event.Row] = []

    def committed(self, row: cdcpb_pb2.Event.Row) -> RowChange:
        return self._change(row.op_type, row.key, row.start_ts, row.commit_ts, row.value, row.old_value)

    def prewrite(self, row: cdcpb_pb2.Event.Row) -> None:
        self._prewrites[(row.key, row.start_ts)] = _Prewrite(row.op_type, row.value, row.old_value)

    def rollback(self, row: cdcpb_pb2.Event.Row) -> None:
        self._prewrites.pop((row.key, row.start_ts), None)

    def commit(self, row: cdcpb_pb2.Event.Row, initialized: bool) -> RowChange | None:
        pw = self._prewrites.pop((row.key, row.start_ts), None)
        if pw is None:
            if not initialized:
                self._held_commits.append(row)
                return None
            raise ChangefeedError(
                f"region {self.region_id}: COMMIT of key {row.key.hex()} start_ts {row.start_ts} has no prewrite"
            )
        return self._change(pw.op, row.key, row.start_ts, row.commit_ts, pw.value, pw.old_value)

    def initialized(self) -> list[RowChange]:
        """Match the commits held back before INITIALIZED."""
        held, self._held_commits = self._held_commits, []
        out = []
        for row in held:
            ch = self.commit(row, initialized=True)
            if ch is not None:
                out.append(ch)
        return out

    def _change(self, op: int, key: bytes, start_ts: int, commit_ts: int, value: bytes, old: bytes) -> RowChange:
        name = _OP_NAMES.get(op) or _op_name(op, f"region {self.region_id}")  # the latter raises
        # Positional: this runs once per pulled row.
        return RowChange(self.region_id, key, name, start_ts, commit_ts, value if name == "put" else None, old or None)
