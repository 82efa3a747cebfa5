"""A person in a real browser: log in to Airflow, trigger a changefeed's DAG through the trigger form with
parameters (a bad value first, which the form refuses), wait for the run, open the Changefeeds page from the
navigation and check the figures it shows against the changefeed's state. The Delta table as of the target
equals the upstream snapshot at it.

Debian's Chromium driven by Playwright (no browser download: ``executable_path=/usr/bin/chromium``). When
Chromium is missing, the set-up installs it from the Debian packages (``apt-get install chromium``). The final
page is kept as a screenshot in ``.artifacts/browser/`` (``CDCFLOW_ARTIFACTS`` overrides the folder).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import preflight  # scripts/ is on sys.path (pyproject's pytest pythonpath)
import pytest

from cdc_core.client.upstream import UpstreamClient
from testkit.e2e import artifacts_dir, delta_rows_at, upstream_rows

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
# The flags this machine's closed network needs (no background connections, no sandbox as root).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CF = "afui"
DAG_ID = f"cdcflow__{CF}"
DB = "afu"


def ensure_chromium() -> str:
    """Debian's chromium, installed from the Debian packages when missing (``make test``'s preflight does the
    same before the suite starts; this covers a pytest run on its own)."""
    try:
        preflight.ensure_packages([preflight.CHROMIUM_PKG], "the browser test")
    except preflight.PreflightError as e:
        pytest.fail(str(e))
    return preflight.CHROMIUM


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = ensure_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def ui_feed(airflow_server: Any, upstream_cluster: Any) -> dict[str, Any]:
    pd = upstream_cluster.pd_addr
    with UpstreamClient(pd) as c:
        c.execute(f"CREATE DATABASE {DB}; CREATE TABLE {DB}.accounts (id INT PRIMARY KEY, owner VARCHAR(32), "
                  f"balance DECIMAL(10,2));")
    home: Path = airflow_server.cdc_home
    config = home / f"{CF}.toml"
    # Hourly: between the trigger (which unpauses the DAG) and the end of the test no scheduled run comes.
    config.write_text(f'changefeed-id = "{CF}"\nsink-uri = "file://{home}/lake/{CF}"\n\n[filter]\n'
                      f'rules = ["{DB}.*"]\n\n[airflow]\nschedule = "@hourly"\n\n[capture]\nauto-start = false\n')
    env = {**airflow_server.env}
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "cdcflow"), "changefeed", "create", "--config", str(config)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with UpstreamClient(pd) as c:
        c.execute(f"INSERT INTO {DB}.accounts VALUES (1, 'ada', 10.50), (2, 'bob', 20), (3, 'cy', 0);"
                  f"UPDATE {DB}.accounts SET id = 4 WHERE id = 3; DELETE FROM {DB}.accounts WHERE id = 2;")
        target = c.get_ts()
        c.execute(f"INSERT INTO {DB}.accounts VALUES (5, 'late', 1);")  # after the target: not in the run
    airflow_server.wait_dag(DAG_ID)
    return {"pd": pd, "target": target, "home": home}


def _login(page: Any, server: Any) -> None:
    page.goto(f"{server.base_url}/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", server.password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.base_url}/", timeout=60_000)


def _open_trigger_form(page: Any, server: Any) -> Any:
    page.goto(f"{server.base_url}/dags/{DAG_ID}")
    page.get_by_role("button", name="Trigger Dag").click()
    dialog = page.get_by_role("dialog")
    dialog.locator("#element_target_ts").wait_for()
    return dialog


def test_trigger_from_the_form_then_see_the_changefeed(browser: Any, airflow_server: Any, ui_feed: dict) -> None:
    server = airflow_server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    shots = artifacts_dir("browser")
    try:
        _login(page, server)

        # 1. A target ts that is neither a TSO nor a datetime: the form refuses it, no run is created.
        dialog = _open_trigger_form(page, server)
        assert dialog.get_by_text("Target ts", exact=True).is_visible()
        dialog.locator("#element_target_ts").fill("yesterday")
        dialog.get_by_role("button", name="Trigger", exact=True).click()
        page.get_by_text("Failed to Trigger Dag").wait_for()
        assert server.runs(DAG_ID) == []
        page.keyboard.press("Escape")

        # 2. A TSO: the run is created and replicates exactly up to it.
        dialog = _open_trigger_form(page, server)
        dialog.locator("#element_target_ts").fill(str(ui_feed["target"]))
        page.screenshot(path=str(shots / "trigger-form.png"), full_page=True)
        dialog.get_by_role("button", name="Trigger", exact=True).click()
        dialog.wait_for(state="hidden")
        runs = server.runs(DAG_ID)
        assert len(runs) == 1 and runs[0]["conf"]["target_ts"] == str(ui_feed["target"])
        try:
            run = server.wait_run(DAG_ID, runs[0]["dag_run_id"], timeout_s=600)
        finally:
            server.pause_and_settle(DAG_ID)  # the form unpaused it; nothing else is to run
        assert run["state"] == "success", server.failure_report(DAG_ID, run["dag_run_id"])
        plan = server.xcom(DAG_ID, run["dag_run_id"], "plan")
        assert plan["target_ts"] == ui_feed["target"] and plan["skip"] is False
        published = server.xcom(DAG_ID, run["dag_run_id"], "publish")
        assert published["checkpoint_ts"] == ui_feed["target"]
        assert [Path(u).name for u in published["asset_events"]] == ["accounts"]
        with UpstreamClient(ui_feed["pd"]) as c:
            want = upstream_rows(c, DB, "accounts", "id", ui_feed["target"])
        assert [r["id"] for r in want] == [1, 4]
        assert delta_rows_at(ui_feed["home"] / "lake" / CF, DB, "accounts", "id", ui_feed["target"]) == want

        # 3. The Changefeeds page, from the navigation, shows the checkpoint the run published.
        state = json.loads((ui_feed["home"] / "state" / f"{CF}.json").read_text())
        assert state["checkpoint_ts"] == ui_feed["target"]
        page.goto(f"{server.base_url}/")
        page.get_by_role("link", name="Changefeeds").click()
        view = page.frame_locator("iframe").first
        row = view.locator(f'[data-testid="changefeed-row-{CF}"]')
        row.wait_for()
        assert row.locator('[data-testid="checkpoint-ts"]').inner_text().strip() == str(ui_feed["target"])
        assert row.locator('[data-testid="state"]').inner_text().strip() == "normal"
        lag = float(row.locator('[data-testid="lag-seconds"]').get_attribute("data-value") or "nan")
        assert 0 <= lag < 3600
        dq = view.locator(f'[data-testid="dq-{DB}.accounts"]')
        assert dq.get_attribute("data-passed") == "true"
        assert view.locator(f'#lag-chart-{CF}').count() == 1
        page.screenshot(path=str(shots / "changefeeds.png"), full_page=True)
    finally:
        page.screenshot(path=str(shots / "last.png"), full_page=True)
        page.close()
