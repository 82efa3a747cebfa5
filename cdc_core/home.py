"""``CDCFLOW_HOME``: where changefeed configs, state, logs and the upstream's address live."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("CDCFLOW_HOME", "./.cdcflow")).resolve()


def changefeeds_dir() -> Path:
    return home() / "changefeeds"


def state_dir() -> Path:
    return home() / "state"


def logs_dir() -> Path:
    return home() / "logs"


def upstream_file() -> Path:
    """Written by ``cdcflow upstream start``: the PD address and the server's pid."""
    return home() / "upstream.json"
