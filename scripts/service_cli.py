"""The command line of the local servers in scripts/ (``local_postgres.py``, ``spark_connect.py``).

``start --dir D --port P`` prints the server's URL, ``status --dir D`` exits 0 when it runs (3 when not),
``stop --dir D`` stops it, ``remove --dir D`` (where the server offers it) stops it and deletes its directory;
an error is one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def run(argv: list[str] | None, *, name: str, description: str, dir_help: str, default_port: int,
        start: Callable[[Path, int], str], stop: Callable[[Path], None], running: Callable[[Path], bool],
        errors: tuple[type[Exception], ...], remove: Callable[[Path], None] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=name, description=description)
    ap.add_argument("action", choices=["start", "stop", "status", *(["remove"] if remove else [])])
    ap.add_argument("--dir", type=Path, required=True, help=dir_help)
    ap.add_argument("--port", type=int, default=default_port)
    a = ap.parse_args(argv)
    try:
        if a.action == "start":
            print(start(a.dir, a.port))
        elif a.action == "status":
            return 0 if running(a.dir) else 3  # pg_ctl's "not running"
        elif a.action == "remove" and remove is not None:
            remove(a.dir)
        else:
            stop(a.dir)
    except errors as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 1
    return 0
