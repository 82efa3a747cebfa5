"""The Delta jars of a Spark session: what ``jars.lock`` pins, where the bootstrap put them, the confs that use them.

``jars.lock`` (project root) lists Maven coordinates with each jar's sha256; ``scripts/fetch_jars.py`` downloads
them once into ``.cache/jars/`` (``CDCFLOW_JARS_DIR`` elsewhere, e.g. in an image). Nothing here downloads: a
session started without them gets a clear error naming the command that fetches them, never a Maven resolution
at run time (``spark.jars.packages`` would resolve through Ivy on every cold start, and fail offline).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "jars.lock"
JARS_DIR_ENV = "CDCFLOW_JARS_DIR"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"

# Delta's SQL extension (MERGE, RESTORE, time travel in SQL) and catalog (Delta tables by name): what
# delta-spark's own ``configure_spark_with_delta_pip`` sets.
DELTA_CONFS: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


class JarsMissingError(RuntimeError):
    pass


@dataclass(frozen=True)
class LockedJar:
    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repo: str = MAVEN_CENTRAL) -> str:
        """The jar's address in a Maven repository laid out as Maven Central is."""
        return f"{repo.rstrip('/')}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.file_name}"


def locked(lock: Path = LOCK) -> list[LockedJar]:
    """The jars ``lock`` pins, in its order. Raises ValueError naming the line of a malformed entry."""
    out: list[LockedJar] = []
    for n, raw in enumerate(lock.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        coords = parts[0].split(":") if parts else []
        if len(parts) != 2 or len(coords) != 3 or len(parts[1]) != 64 or any(not c for c in coords):
            raise ValueError(f"{lock}:{n}: expected 'group:artifact:version sha256', got {raw.strip()!r}")
        out.append(LockedJar(coords[0], coords[1], coords[2], parts[1].lower()))
    return out


def jars_dir() -> Path:
    return Path(os.environ.get(JARS_DIR_ENV) or ROOT / ".cache" / "jars")


def jar_paths() -> list[Path]:
    """The locked jars on this machine. Raises JarsMissingError when the bootstrap has not fetched them."""
    paths = [jars_dir() / j.file_name for j in locked()]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise JarsMissingError(
            f"the Delta jars {', '.join(missing)} are not in {jars_dir()}: run `make venv` (or "
            f"`python scripts/fetch_jars.py`) to fetch what jars.lock pins")
    return paths


def delta_version() -> str:
    """The delta-spark release ``jars.lock`` pins."""
    return next(j.version for j in locked() if j.artifact.startswith("delta-spark_"))


def session_confs() -> dict[str, str]:
    """Confs of a session created in this process (or by spark-submit): the jars on the driver's and executors'
    classpath, Delta's extension and catalog."""
    return {"spark.jars": ",".join(str(p) for p in jar_paths()), **DELTA_CONFS}
