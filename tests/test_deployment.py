"""The container deployment (Dockerfile, .dockerignore, docker-compose.yml) as a compose parser and an operator
read it: valid, no secret with a default, every long-running service with a health check, one JWT secret for
every Airflow role, an image that runs as an ordinary user without dev tools, built from the sources only."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SECRETS = {"POSTGRES_USER": "cdc", "POSTGRES_PASSWORD": "pw-from-env", "AIRFLOW_JWT_SECRET": "jwt-from-env",
           "AIRFLOW_FERNET_KEY": "fernet-from-env", "TIDB_PASSWORD": "tidb-from-env"}


def _compose(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("docker-compose")
    assert exe, "Debian's docker-compose is missing (make test's preflight installs it)"
    clean = {k: v for k, v in os.environ.items() if k not in SECRETS and k != "UPSTREAM_ADVERTISE_HOST"}
    return subprocess.run([exe, "-f", str(ROOT / "docker-compose.yml"), "config"], capture_output=True, text=True,
                          env={**clean, **env}, timeout=120, cwd=ROOT)


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    res = _compose(SECRETS)
    assert res.returncode == 0, res.stderr
    out: dict[str, Any] = yaml.safe_load(res.stdout)
    return out


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_compose_refuses_to_run_without_each_secret(missing):
    res = _compose({k: v for k, v in SECRETS.items() if k != missing})
    assert res.returncode != 0 and f"set {missing}" in res.stderr, res.stderr


def test_secrets_come_from_the_environment_only(resolved):
    services = resolved["services"]
    airflow = {n: s for n, s in services.items() if n.startswith("airflow-")}
    assert {s["environment"]["AIRFLOW__API_AUTH__JWT_SECRET"] for s in airflow.values()} == {"jwt-from-env"}
    assert {s["environment"]["AIRFLOW__CORE__FERNET_KEY"] for s in airflow.values()} == {"fernet-from-env"}
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "pw-from-env"
    assert all("cdc:pw-from-env@postgres" in s["environment"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
               for s in airflow.values())
    raw = (ROOT / "docker-compose.yml").read_text()
    for name in SECRETS:  # no default baked in: each is ${NAME:?...}
        assert f"${{{name}:-" not in raw and f"${{{name}}}" not in raw and f"${{{name}:?" in raw, name


def test_every_service_has_a_health_check_and_ports_stay_on_loopback(resolved):
    for name, svc in resolved["services"].items():
        if name != "airflow-init":  # a one-shot migration: the others wait for it to complete
            assert svc.get("healthcheck", {}).get("test"), f"{name} has no health check"
        for port in svc.get("ports", []):
            assert str(port.get("host_ip") if isinstance(port, dict) else port).startswith("127.0.0.1"), (name, port)


def test_the_upstream_publishes_an_address_other_containers_reach(resolved):
    cmd = resolved["services"]["upstream"]["command"]
    assert cmd[cmd.index("--advertise-host") + 1] == "upstream" and "0.0.0.0:2379" in cmd
    # no control port (faults are for tests), and SQL with a password cdcflow's services log in with
    assert "--control-addr" not in cmd
    assert resolved["services"]["upstream"]["environment"]["CDCFLOW_UPSTREAM_SQL_PASSWORD"] == "tidb-from-env"
    assert all(s["environment"]["CDCFLOW_TIDB_PASSWORD"] == "tidb-from-env"
               for n, s in resolved["services"].items() if n.startswith("airflow-"))
    env = resolved["services"]["airflow-worker"]["environment"]
    assert env["CDCFLOW_UPSTREAM"] == "upstream:2379" and env["CDCFLOW_SPARK_MASTER"] == "spark://spark-master:7077"


def test_the_image_runs_as_an_ordinary_user_without_dev_tools_from_the_sources_only():
    docker = (ROOT / "Dockerfile").read_text().splitlines()
    users = [ln.split()[1] for ln in docker if ln.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    export = next(ln for ln in docker if "uv export" in ln)
    assert "--all-extras" not in export and "--extra deploy" in export
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".airflow", ".cdcflow", ".cache"} <= ignored


def _target_port(published: Any) -> int:
    """The container port of a compose ``ports`` entry (``127.0.0.1:8080:8080/tcp`` or the long form)."""
    if isinstance(published, dict):
        return int(published["target"])
    return int(str(published).split("/")[0].rsplit(":", 1)[-1])


def test_compose_is_the_process_topology_make_test_runs(resolved):
    """docker-compose.yml and tests/testkit/topology.py (the distributed end-to-end test's processes) are one topology:
    the same services, each with the same command, options, replicas and restart policy, the same published ports,
    and every cdcflow and Airflow service with the topology's environment, each address naming the same service and
    port."""
    from testkit.topology import SERVICES, SHARED_ENV, fill

    services = resolved["services"]
    assert set(services) == set(SERVICES)
    addresses = {f"{name}:{port_name}": f"{name}:{port}"
                 for name, spec in SERVICES.items() for port_name, port in spec.ports.items()}
    for name, spec in SERVICES.items():
        svc = services[name]
        assert svc.get("restart") == ("unless-stopped" if spec.restarts else None), (name, svc.get("restart"))
        if spec.image:
            assert svc["image"].split(":")[0] == spec.image, name
            continue
        command = svc["command"]
        assert tuple(command[:len(spec.program)]) == spec.program, (name, command)
        assert set(spec.options) <= set(command), (name, spec.options, command)
        assert svc.get("deploy", {}).get("replicas", 1) == spec.replicas, name
        assert sorted(_target_port(p) for p in svc.get("ports", [])) == sorted(spec.ports[p] for p in spec.published)
        env = svc["environment"]
        for key, template in SHARED_ENV.items():
            if "{path:" in template:  # a path in the image or a volume
                assert str(env[key]).startswith("/"), (name, key, env.get(key))
            else:
                assert str(env[key]) == fill(template, addresses, SECRETS), (name, key)
