"""The alert rules cdcflow ships (deploy/prometheus/): valid for Prometheus (``promtool check rules``) and doing
what their tests say (``promtool test rules``: each alert fires and clears on the series that should make it).
The end-to-end scrape of a running deployment is tests/e2e/test_airflow_scheduler.py's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    assert exe, "Debian's prometheus (promtool) is missing (make test's preflight installs it)"
    return subprocess.run([exe, *args], cwd=RULES, capture_output=True, text=True, timeout=120)


def test_the_rules_are_valid() -> None:
    out = _promtool("check", "rules", "cdcflow-alerts.yml")
    assert out.returncode == 0 and "SUCCESS: 7 rules found" in out.stdout, out.stdout + out.stderr


def test_the_rules_fire_and_clear_as_their_tests_say() -> None:
    out = _promtool("test", "rules", "cdcflow-alerts.test.yml")
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def test_a_rule_that_does_not_match_its_test_fails(tmp_path: Path) -> None:
    """The harness can fail: the same tests against a rule file whose lag threshold moved."""
    rules = (RULES / "cdcflow-alerts.yml").read_text().replace("lag_seconds > 900", "lag_seconds > 9000")
    (tmp_path / "cdcflow-alerts.yml").write_text(rules)
    shutil.copy(RULES / "cdcflow-alerts.test.yml", tmp_path)
    exe = shutil.which("promtool")
    assert exe
    out = subprocess.run([exe, "test", "rules", "cdcflow-alerts.test.yml"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0 and "CdcflowCheckpointLagging" in out.stdout + out.stderr
