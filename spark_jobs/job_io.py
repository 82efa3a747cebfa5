"""The command line of cdcflow's jobs run by hand: JSON arguments in, JSON result out; and the checks every job's
options object makes of those arguments (names it does not take, required ones missing, ts values).

``spark-submit <job>.py --args FILE [--result FILE]`` runs one job; each job's ``main`` reads its arguments and
writes its result through these functions. (``cdc_core.changefeed.spark_engine`` does not use them: it runs a
task's jobs in one application, ``spark_jobs.job_server``.)
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cdc_core.schema.model import TableInfo


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


def read_args(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        args: dict[str, Any] = json.load(f)
    return args


def write_result(result: dict[str, Any], path: str | None) -> None:
    """Write the result JSON to ``path``, or to stdout when no path is given."""
    text = json.dumps(result, sort_keys=True)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text + "\n")


def args_file_main(
    prog: str, description: str, run_job: Callable[[dict[str, Any]], dict[str, Any]], argv: Sequence[str] | None = None
) -> int:
    """The whole ``main`` of a job that takes only ``--args FILE [--result FILE]``."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--args", required=True, help="JSON file with the run_job arguments")
    p.add_argument("--result", help="write the result JSON here (default: stdout)")
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    write_result(run_job(read_args(ns.args)), ns.result)
    return 0
