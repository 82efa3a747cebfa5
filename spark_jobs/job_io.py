"""The command line of cdcflow's jobs run by hand: JSON arguments in (read into the job's
``cdc_core.changefeed.job_args`` class, which checks them), JSON result out.

``spark-submit <job>.py --args FILE [--result FILE]`` runs one job; each job's ``main`` reads its arguments and
writes its result through these functions. (``cdc_core.changefeed.spark_engine`` does not use them: it runs a
task's jobs in one application, ``spark_jobs.job_server``.)
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from cdc_core.changefeed.job_args.base import JobArgs

A = TypeVar("A", bound=JobArgs)


def read_job_args(args_class: type[A], path: str) -> A:
    """The job's arguments from the JSON file ``path``, checked by ``args_class``."""
    with open(path, encoding="utf-8") as f:
        args = args_class.from_dict(json.load(f))
    assert isinstance(args, args_class)
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
    prog: str, description: str, run_job: Callable[[A], dict[str, Any]], args_class: type[A],
    argv: Sequence[str] | None = None,
) -> int:
    """The whole ``main`` of a job that takes only ``--args FILE [--result FILE]`` (read as ``args_class``)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--args", required=True, help="JSON file with the run_job arguments")
    p.add_argument("--result", help="write the result JSON here (default: stdout)")
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    write_result(run_job(read_job_args(args_class, ns.args)), ns.result)
    return 0
