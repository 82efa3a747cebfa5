"""The ``ddl_apply`` job's arguments: one DDL job at its barrier, with the other side of an EXCHANGE PARTITION and
where the upstream is for a re-key (``cdc_core.changefeed.steps`` sends them; ``spark_jobs.ddl_apply`` runs them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from cdc_core.changefeed.job_args.base import JobArgs, check_names, table_arg
from cdc_core.errors import ChangefeedError
from cdc_core.schema.ddl_job import DDLJob
from cdc_core.schema.model import TableInfo


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
    history: bool = False  # the table keeps a history table ([sink] history): the DDL is followed there too

    @classmethod
    def from_dict(cls, args: Mapping[str, Any]) -> DdlApplyArgs:
        """``args`` as JSON gives them: ``job`` as ``DDLJob.to_json()``, table infos as JSON (or null)."""
        check_names(cls.JOB, args, [f.name for f in fields(cls)], ("sink_uri", "changefeed_id", "job"))
        ex, up = args.get("exchange"), args.get("upstream")
        return cls(str(args["sink_uri"]), str(args["changefeed_id"]), _ddl_job(args["job"]),
                   _info(args.get("before")), _info(args.get("after")), Exchange.from_args(ex) if ex else None,
                   Upstream.from_args(up) if up else None, bool(args.get("history", False)))

    def to_dict(self) -> dict[str, Any]:
        return {"sink_uri": self.sink_uri, "changefeed_id": self.changefeed_id, "job": self.job.to_json(),
                "before": self.before.to_json() if self.before else None,
                "after": self.after.to_json() if self.after else None,
                "exchange": self.exchange.to_dict() if self.exchange else None,
                "upstream": self.upstream.to_dict() if self.upstream else None, "history": self.history}
