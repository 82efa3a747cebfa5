"""Installing Debian packages the project needs from the system (PostgreSQL's server as root, Chromium).

One place that knows how this user can run apt-get: directly as root, through ``sudo -n`` where that is allowed,
or not at all — then the caller's error names the packages and the command to run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


class InstallError(RuntimeError):
    pass


def installer() -> list[str] | None:
    """The prefix this user runs apt-get with (``[]`` as root, ``["sudo", "-n"]``), or None when it cannot."""
    if not shutil.which("apt-get"):
        return None
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


def install(names: list[str], what: str) -> None:
    """``apt-get install`` the packages ``names`` (for ``what``, said on stderr); raises when it cannot."""
    sudo = installer()
    if sudo is None:
        raise InstallError(f"{what} needs the Debian packages {', '.join(names)}; install them as root: "
                           f"apt-get install -y {' '.join(names)}")
    print(f"installing Debian's {' '.join(names)} for {what}", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *names]):
        r = subprocess.run([*sudo, *cmd], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise InstallError(f"{' '.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()[-1500:]}")
