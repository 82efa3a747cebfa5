"""Fetch the jars ``jars.lock`` pins into the project-local cache (``.cache/jars/``), checking each sha256.

Run by ``scripts/bootstrap.sh``; idempotent (a jar already there with the locked hash is not fetched again).
``CDCFLOW_MAVEN_REPO`` names another repository laid out as Maven Central (a mirror or a proxy).

    python scripts/fetch_jars.py [--dest DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cdc_core.changefeed.delta_jars import MAVEN_CENTRAL, LockedJar, jars_dir, locked

ATTEMPTS = 3


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(jar: LockedJar, dest: Path, repo: str) -> bool:
    """Put ``jar`` in ``dest``; True when it was downloaded, False when it was there already."""
    target = dest / jar.file_name
    if target.is_file() and _sha256(target) == jar.sha256:
        return False
    tmp = target.with_suffix(".part")
    url = jar.url(repo)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(url, timeout=60) as resp, tmp.open("wb") as out:
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
            break
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            if attempt == ATTEMPTS:
                raise SystemExit(f"error: cannot download {jar.coordinates} from {url}: {e}") from e
            time.sleep(2 * attempt)
    got = _sha256(tmp)
    if got != jar.sha256:
        tmp.unlink()
        raise SystemExit(f"error: {jar.coordinates} from {url} has sha256 {got}, jars.lock pins {jar.sha256}")
    os.replace(tmp, target)
    return True


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dest", type=Path, default=None, help="where the jars go (default .cache/jars)")
    args = p.parse_args()
    dest = args.dest or jars_dir()
    dest.mkdir(parents=True, exist_ok=True)
    repo = os.environ.get("CDCFLOW_MAVEN_REPO") or MAVEN_CENTRAL
    got = [j.coordinates for j in locked() if fetch(j, dest, repo)]
    if got:
        print(f"fetch_jars: {len(got)} jar(s) into {dest}: {', '.join(got)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
