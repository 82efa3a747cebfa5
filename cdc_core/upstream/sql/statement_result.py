"""What a statement of the SQL front returns: its columns and rows (a SELECT's streamed a batch at a time), affected
rows, the commit ts of the transaction it committed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from cdc_core.schema.model import Column

# Rows a streamed SELECT decodes at a time (one batch per trip off the event loop; what a result holds at once).
STREAM_BATCH_ROWS: Final = 1024


@dataclass
class StatementResult:
    statement: str
    columns: list[str] = field(default_factory=list)  # the keys of ``rows``, one per result column
    # Typed values (``Column.convert``'s Python values); ``value_text.json_value`` gives their JSON form.
    rows: list[dict[str, Any]] = field(default_factory=list)
    # The table column each output column is (None: an expression), for clients that want column types.
    column_defs: list[Column | None] = field(default_factory=list)
    affected_rows: int = 0
    commit_ts: int = 0  # the commit ts of the transaction this statement committed (0: none)
    # A streamed SELECT's rows after ``rows`` (its first batch), decoded a batch per ``next`` as the client reads
    # them (sessions with ``stream_rows``): a region's million rows never make one list, as TiDB streams them.
    more: Iterator[list[dict[str, Any]]] | None = None
    # The names the client sees, when two columns share one (``SELECT * FROM a JOIN b``); else ``columns``.
    names: list[str] | None = None

    @property
    def display_names(self) -> list[str]:
        return self.names if self.names is not None else self.columns
