"""Structured logging (structlog over stdlib logging): JSON lines to ``$CDCFLOW_HOME/logs``.

Operators grep these for the signals docs/architecture.md's Observability names; tracebacks go here, never to the
user's terminal.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import structlog

from cdc_core.home import logs_dir

_configured = False
MAX_BYTES = 50 << 20
BACKUPS = 3


def file_handler(path: Path, max_bytes: int = MAX_BYTES, backups: int = BACKUPS) -> logging.Handler:
    """The log file every cdcflow process of a home appends to (the CLI, each Airflow task, the Spark jobs):
    stdlib's RotatingFileHandler rotates per process and loses or interleaves the others' lines around a
    rotation; concurrent-log-handler writes and rotates under a lock file beside the log."""
    from concurrent_log_handler import ConcurrentRotatingFileHandler

    return ConcurrentRotatingFileHandler(str(path), maxBytes=max_bytes, backupCount=backups, encoding="utf-8")


def configure(level: str = "INFO", *, to_stderr: bool = False) -> None:
    global _configured
    if _configured:
        return
    _configured = True
    handlers: list[logging.Handler] = []
    try:
        d = logs_dir()
        d.mkdir(parents=True, exist_ok=True)
        handlers.append(file_handler(d / "cdcflow.log"))
    except OSError:
        to_stderr = True
    if to_stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    root = logging.getLogger()
    root.setLevel(level)
    for h in handlers:
        h.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(h)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        cache_logger_on_first_use=True,
    )


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)  # type: ignore[no-any-return]
