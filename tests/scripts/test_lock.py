"""uv.lock, the project's lock file: it matches pyproject.toml and is what the bootstrap installed."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^[A-Za-z0-9_.\-]+(?:\[[^\]]*\])?==[^\\]+")


def _uv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "uv", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_lock_matches_pyproject() -> None:
    checked = _uv("lock", "--check", "--offline")
    assert checked.returncode == 0, checked.stderr


def test_every_locked_package_is_installed_at_its_pinned_version_with_hashes() -> None:
    exported = _uv("export", "--frozen", "--offline", "--all-extras", "--no-emit-project",
                   "--format", "requirements.txt")
    assert exported.returncode == 0, exported.stderr
    reqs = [Requirement(m[0].strip()) for line in exported.stdout.splitlines() if (m := PIN.match(line))]
    # the pins for this interpreter and platform (the lock also holds e.g. colorama for Windows)
    pins = {_norm(r.name): next(iter(r.specifier)).version for r in reqs if r.marker is None or r.marker.evaluate()}
    assert len(pins) > 150 and {"apache-airflow", "pyspark", "deltalake", "grpcio"} <= pins.keys()
    # every pin carries hashes: the bootstrap installs with --require-hashes
    assert exported.stdout.count("--hash=sha256:") >= len(pins)
    installed = {_norm(d.metadata["Name"]): d.version for d in metadata.distributions()}
    wrong = {name: (want, installed.get(name)) for name, want in pins.items() if installed.get(name) != want}
    assert wrong == {}, f"installed versions differ from uv.lock (want, have): {wrong}"
