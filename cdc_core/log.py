"""Structured logging (structlog over stdlib logging): JSON lines to ``$CDCFLOW_HOME/logs``.

Operators grep these for the signals ARCHITECTURE.md §6 names; tracebacks go here, never to the
user's terminal.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys

import structlog

from cdc_core.home import logs_dir

_configured = False


def configure(level: str = "INFO", *, to_stderr: bool = False) -> None:
    global _configured
    if _configured:
        return
    _configured = True
    handlers: list[logging.Handler] = []
    try:
        d = logs_dir()
        d.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.handlers.RotatingFileHandler(d / "cdcflow.log", maxBytes=50 << 20, backupCount=3))
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
