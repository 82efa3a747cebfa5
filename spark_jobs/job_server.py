"""The driver of one Spark application that runs many cdcflow jobs: what ``spark-submit`` starts for a task.

``cdc_core.changefeed.spark_engine`` submits this file once per task (``spark_engine.one_application``) instead of
one application per job: a window's DDL, apply, checks and rollback then share one driver JVM, one registration
with the master and one set of executors (each submission cost all three again: ~20-40 s under the soak's load).

Protocol, over the Unix socket the submitter listens on (``--socket``; a local file, because spark-submit's Python
runner gives the driver no stdin and merges its stderr into stdout): first ``{"pid": <this driver>}`` (so that a
submitter that gives up can kill it, not only the JVM it runs under), then one JSON request per line,
``{"job": name, "args": {...}}`` (a key of ``spark_engine.JOBS`` and the JSON of its ``job_args`` class), each
answered by one JSON line, ``{"result": {...}}`` or ``{"error": "<the traceback>", "spark_alive": <whether the
SparkContext still runs>}``. The job's own exception does not end the application (the submitter judges it, as it
judges a one-shot job's exit); the end of the socket does.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import traceback
from collections.abc import Sequence
from typing import Any

from cdc_core.changefeed import spark_engine
from cdc_core.changefeed.job_args.registry import from_job_dict

# The JVM this driver runs under (spark-submit's PythonRunner starts the driver as its child): once it is gone, this
# process is someone else's child.
_JVM_PID = os.getppid()


def run_request(request: dict[str, Any]) -> bytes:
    """One job: the reply line with its result, or with the traceback of what it raised (a result that is not
    JSON included)."""
    try:
        # only cdcflow's jobs run here: a name that is not one of them is refused before anything is imported
        args = from_job_dict(str(request["job"]), request["args"])
        result = spark_engine.entry_point(args.JOB)(args)
        return json.dumps({"result": result}).encode() + b"\n"
    except Exception:  # the traceback goes back to the submitter, which logs and judges it
        return json.dumps({"error": traceback.format_exc(), "spark_alive": spark_alive()}).encode() + b"\n"


def spark_alive() -> bool:
    """Whether this driver's SparkContext still runs: a job that failed under a stopped context or a JVM gone (the
    cluster's failure, not the job's) says no, and so does a driver whose JVM is no longer its parent: before any job
    has made a context that is the only sign of a killed JVM (the job then fails in py4j, which says nothing of it)."""
    if os.getppid() != _JVM_PID:
        return False
    try:
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        return sc is None or not sc._jsc.sc().isStopped()
    except Exception:  # py4j cannot reach the JVM
        return False


def serve(path: str) -> int:
    """Answer the submitter's requests until it closes the socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        with conn.makefile("rb") as requests, conn.makefile("wb") as replies:
            replies.write(json.dumps({"pid": os.getpid()}).encode() + b"\n")
            replies.flush()
            for line in requests:
                replies.write(run_request(json.loads(line)))
                replies.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spark_jobs.job_server", description="cdcflow's Spark jobs, one application")
    p.add_argument("--socket", required=True, help="the submitter's Unix socket")
    ns = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return serve(ns.socket)


if __name__ == "__main__":
    from cdc_core.process_exit import run_and_exit

    run_and_exit(main)
