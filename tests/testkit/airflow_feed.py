"""A changefeed driven through a real Airflow (standalone or the distributed topology), as the Airflow end-to-end
tests share it: its ``cdcflow`` commands, the upstream writes of a batch, Delta against the upstream at a ts, and
the waits on Airflow's clock (interval boundaries of a delta schedule)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec import tso
from testkit.e2e import delta_rows_at, upstream_rows

ROOT = Path(__file__).resolve().parents[2]


class AirflowFeed:
    """Changefeed ``cf`` of ``server``'s Airflow over ``db`` (tables ``orders`` and ``notes``, keyed by ``id``),
    its config and lake under ``home``."""

    TABLES = {"orders": "id", "notes": "id"}

    def __init__(self, server: Any, pd_addr: str, home: Path, cf: str, db: str) -> None:
        self.server, self.pd_addr, self.home, self.cf, self.db = server, pd_addr, home, cf, db
        self.dag_id = f"cdcflow__{cf}"
        self.sink = home / "lake" / cf
        self.next_id = 1

    def cdcflow(self, *args: str) -> str:
        env = {**self.server.env, "CDCFLOW_HOME": str(self.home), "CDCFLOW_UPSTREAM": self.pd_addr}
        proc = subprocess.run([str(ROOT / ".venv" / "bin" / "cdcflow"), *args], env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, f"cdcflow {' '.join(args)}: {proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def sql(self, script: str) -> None:
        with UpstreamClient(self.pd_addr) as c:
            c.execute(script)

    def create(self, every_s: int, extra_toml: str = "", *, auto_start: bool = False) -> None:
        """The two tables upstream and the changefeed over them (a delta schedule of ``every_s``, no catch-up);
        ``auto_start``: its DAG runs start its capture (``[capture] auto-start``; off here, so that a test that
        does not stop a capture leaves none running)."""
        self.sql(f"""
            CREATE DATABASE {self.db};
            CREATE TABLE {self.db}.orders (id INT PRIMARY KEY, sku VARCHAR(32) NOT NULL, qty INT,
                                           UNIQUE KEY uk_sku (sku));
            CREATE TABLE {self.db}.notes (id BIGINT PRIMARY KEY NONCLUSTERED, body VARCHAR(64));
        """)
        config = self.home / f"{self.cf}.toml"
        config.write_text(f"""\
changefeed-id = "{self.cf}"
sink-uri = "file://{self.sink}"

[filter]
rules = ["{self.db}.*"]

[airflow]
schedule = "{every_s}s"
catchup = false

[capture]
auto-start = {str(auto_start).lower()}
{extra_toml}""")
        self.cdcflow("changefeed", "create", "--config", str(config))

    def batch(self, n: int = 3) -> None:
        """Inserts, an update that moves a primary key, an update of a unique key, a delete."""
        i, db = self.next_id, self.db
        self.next_id += n + 1
        values = ", ".join(f"({i + k}, 'sku-{i + k}', {k + 1})" for k in range(n))
        self.sql(f"""
            INSERT INTO {db}.orders VALUES {values};
            INSERT INTO {db}.notes VALUES ({i}, 'note {i}'), ({i + 1}, 'note {i + 1}');
            BEGIN;
            UPDATE {db}.orders SET id = {i + n} WHERE id = {i};
            UPDATE {db}.orders SET sku = 'sku-moved-{i}', qty = qty + 10 WHERE id = {i + 1};
            COMMIT;
            DELETE FROM {db}.notes WHERE id = {i + 1};
        """)

    def now_ts(self) -> int:
        with UpstreamClient(self.pd_addr) as c:
            return c.get_ts()

    def state(self) -> dict[str, Any]:
        return dict(json.loads(self.cdcflow("changefeed", "query", self.cf)))

    def checkpoint(self) -> int:
        return int(self.state()["checkpoint_ts"])

    def assert_equal_at(self, ts: int) -> None:
        with UpstreamClient(self.pd_addr) as c:
            for table, key in self.TABLES.items():
                want = upstream_rows(c, self.db, table, key, ts)
                assert delta_rows_at(self.sink, self.db, table, key, ts) == want, f"{self.db}.{table} differs at {ts}"

    def assert_equal_at_checkpoint(self) -> None:
        self.assert_equal_at(self.checkpoint())

    def assert_ok(self, run: dict[str, Any]) -> None:
        assert run["state"] == "success", self.server.failure_report(self.dag_id, run["dag_run_id"])


def wait_for(cond: Callable[[], Any], timeout_s: float, what: str, poll_s: float = 2.0) -> Any:
    """``cond()``'s first truthy value, polled until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll_s)


def interval_end_ts(run: dict[str, Any]) -> int:
    """A run's data interval end as a TSO (the window it applies ends there)."""
    return tso.from_datetime(datetime.fromisoformat(run["data_interval_end"]), end_of_ms=True)


def next_boundary(after: datetime, every_s: int) -> datetime:
    """The next interval boundary of an ``every_s`` grid (Airflow aligns delta timetables to the epoch)."""
    secs = int(after.timestamp()) // every_s * every_s + every_s
    return datetime.fromtimestamp(secs, tz=UTC)


def sleep_past(moment: datetime) -> None:
    # Waiting for wall-clock time itself (an interval boundary) is the condition here.
    time.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds() + 0.5))
