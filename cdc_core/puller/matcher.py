"""Matches a region's PREWRITE and COMMIT rows into committed row changes, with TiCDC's rules.

After TiCDC's ``logservice/logpuller/txn_matcher.go`` and its use in ``region_event_handler.go``:

- COMMITTED rows (the incremental scan) pass through.
- PREWRITE rows are cached by ``(key, start_ts)``. A second PREWRITE of a cached pair with an empty value is
  a *fake* prewrite (TiKV reports a transaction heartbeat's lock rewrite that way) and is ignored; for
  pipelined DML the row with the highest ``generation`` is kept.
- A COMMIT takes its cached prewrite's value and old value. Before INITIALIZED it matches only a prewrite with
  a value and no generation (prewrites may still arrive out of order); otherwise it is cached. At INITIALIZED
  the cached commits are matched; one still without a prewrite is dropped, because the scan has already
  delivered that change as COMMITTED. After INITIALIZED a COMMIT without a prewrite is a broken upstream.
- A ROLLBACK drops the cached prewrite; before INITIALIZED it is cached and applied at INITIALIZED.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from cdc_core.errors import ChangefeedError
from cdc_core.log import get_logger
from cdc_core.proto import cdcpb_pb2

LogType = cdcpb_pb2.Event.LogType
OpType = cdcpb_pb2.Event.Row.OpType
# Plain ints: attribute lookups on protobuf enum wrappers are slow on a per-row path.
_PUT = int(OpType.PUT)
_DELETE = int(OpType.DELETE)
_OP_NAMES = {_PUT: "put", _DELETE: "delete"}

log = get_logger("cdcflow.puller.matcher")


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
    generation: int


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
        self._held_rollbacks: list[cdcpb_pb2.Event.Row] = []
        self.fake_prewrites = 0  # ignored heartbeat prewrites, for tests and debugging

    @property
    def pending(self) -> int:
        """Prewrites waiting for their commit or rollback."""
        return len(self._prewrites)

    def committed(self, row: cdcpb_pb2.Event.Row) -> RowChange:
        return self._change(row.op_type, row.key, row.start_ts, row.commit_ts, row.value, row.old_value)

    def prewrite(self, row: cdcpb_pb2.Event.Row) -> None:
        k = (row.key, row.start_ts)
        old = self._prewrites.get(k)
        if old is not None:
            if not row.value:  # a heartbeat's lock rewrite: it must not wipe the value
                self.fake_prewrites += 1
                return
            if row.generation < old.generation:  # pipelined DML: the latest flush wins
                return
        self._prewrites[k] = _Prewrite(row.op_type, row.value, row.old_value, row.generation)

    def rollback(self, row: cdcpb_pb2.Event.Row, initialized: bool = True) -> None:
        if not initialized:
            self._held_rollbacks.append(row)
            return
        self._prewrites.pop((row.key, row.start_ts), None)

    def commit(self, row: cdcpb_pb2.Event.Row, initialized: bool) -> RowChange | None:
        k = (row.key, row.start_ts)
        pw = self._prewrites.get(k)
        # Before INITIALIZED an empty value may be a fake prewrite standing in for one the scan has yet to send,
        # and a pipelined prewrite may yet be superseded: such commits wait for INITIALIZED.
        if pw is not None and (initialized or (pw.value and not pw.generation)):
            del self._prewrites[k]
            return self._change(pw.op, row.key, row.start_ts, row.commit_ts, pw.value, pw.old_value)
        if not initialized:
            self._held_commits.append(row)
            return None
        raise ChangefeedError(
            f"region {self.region_id}: COMMIT of key {row.key.hex()} start_ts {row.start_ts} has no prewrite"
        )

    def initialized(self) -> list[RowChange]:
        """Match the commits and apply the rollbacks held back before INITIALIZED."""
        held, self._held_commits = self._held_commits, []
        out = []
        for row in held:
            pw = self._prewrites.pop((row.key, row.start_ts), None)
            if pw is None:
                # Its prewrite came before this request: the scan sent the change as COMMITTED.
                log.info("ignore commit event without prewrite", region_id=self.region_id, key=row.key.hex(),
                         start_ts=row.start_ts)
                continue
            out.append(self._change(pw.op, row.key, row.start_ts, row.commit_ts, pw.value, pw.old_value))
        rollbacks, self._held_rollbacks = self._held_rollbacks, []
        for row in rollbacks:
            self._prewrites.pop((row.key, row.start_ts), None)
        return out

    def _change(self, op: int, key: bytes, start_ts: int, commit_ts: int, value: bytes, old: bytes) -> RowChange:
        name = _OP_NAMES.get(op) or _op_name(op, f"region {self.region_id}")  # the latter raises
        # Positional: this runs once per pulled row.
        return RowChange(self.region_id, key, name, start_ts, commit_ts, value if name == "put" else None, old or None)
