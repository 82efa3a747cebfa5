"""What every Spark job's arguments share: :class:`JobArgs` (a job's name and its JSON both ways) and the checks a
job makes of that JSON, each refusal a ``ValueError`` naming the job and the argument."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from cdc_core.changefeed.config import DQ_MODES, is_dq_mode
from cdc_core.schema.model import TableInfo


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


def opt_ts(job: str, name: str, v: Any) -> int | None:
    """:func:`ts_arg`, or None for a null."""
    return None if v is None else ts_arg(job, name, v)


def bool_arg(job: str, name: str, v: Any) -> bool:
    """The flag argument ``name`` of ``job``: true or false, nothing else (a ``ValueError`` naming both)."""
    if not isinstance(v, bool):
        raise ValueError(f"{job}: {name} must be true or false, got {v!r}")
    return v


def entries_json(tables: Iterable[tuple[TableInfo, bool]]) -> list[dict[str, Any]]:
    """The JSON of the checks' tables, as :func:`table_entries` reads it."""
    return [{"table": t.to_json(), "content": c} for t, c in tables]


def check_mode(mode: str) -> None:
    """Refuse a data-quality mode not in ``DQ_MODES`` (the ``ValueError`` names them)."""
    if not is_dq_mode(mode):
        raise ValueError(f"data-quality mode must be one of {DQ_MODES}, got {mode!r}")
