"""Fetch the Go modules the tests' Go programs pin (their ``go.sum``) into the project-local cache ``.cache/go-mod``.

Run by ``scripts/bootstrap.sh``, as ``fetch_jars.py`` is for the Delta jars: a test builds its Go program
(``tests/wire/go_mysql``: Go's ``go-sql-driver/mysql`` against the MySQL front) with ``GOPROXY=off`` and
``-mod=readonly``, so nothing is downloaded during a test run. Idempotent (``go mod download`` checks the cache and
each module's hash in ``go.sum``). Without Go on the machine it says so and does nothing: those tests then skip.

    python scripts/fetch_go_modules.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
GO_PROGRAMS = sorted(p.parent for p in (PROJECT / "tests").rglob("go.mod"))


def go_env(*, offline: bool) -> dict[str, str]:
    """The environment a Go build of the project's programs runs in: the module and build caches under ``.cache``;
    ``offline`` (a test's build) forbids any download and any change to ``go.mod``/``go.sum``."""
    env = {**os.environ, "GOMODCACHE": str(PROJECT / ".cache" / "go-mod"),
           "GOCACHE": str(PROJECT / ".cache" / "go-build"), "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"}
    if offline:
        env["GOPROXY"] = "off"
    return env


def main() -> int:
    go = shutil.which("go")
    if go is None:
        print("fetch_go_modules: no 'go' on PATH; the Go client tests will skip", file=sys.stderr)
        return 0
    for program in GO_PROGRAMS:
        done = subprocess.run([go, "mod", "download", "-x"] if os.environ.get("CDCFLOW_VERBOSE") else
                              [go, "mod", "download"], cwd=program, env=go_env(offline=False), check=False,
                              capture_output=True, text=True)
        if done.returncode != 0:
            print(f"fetch_go_modules: go mod download in {program.relative_to(PROJECT)} failed:\n{done.stderr}",
                  file=sys.stderr)
            return 1
    print(f"fetch_go_modules: {len(GO_PROGRAMS)} Go program(s)' modules in {PROJECT / '.cache' / 'go-mod'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
