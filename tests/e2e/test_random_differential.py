"""Issue 6's randomized differential tests: a seeded random workload (multi-table transactions moving primary
and unique keys, seed 002's swaps, deletes, DDL sprinkled in) replicated window by window through
``changefeed run``; after every window each Delta table equals the upstream snapshot at the checkpoint. A second
client writes all along (``testkit.concurrent_writer``), so that DML commits at a DDL's commit ts (async commit and
1PC, TiDB's defaults, do not give unique commit ts): at least one must in a run, and lands before the DDL.
Then the same with the process killed — at every failpoint where a window can be left half done, and at a
random moment — and re-run: the tables end as an uninterrupted run leaves them.

Seeds: ``CDCFLOW_DIFF_SEED`` (default: a fixed one, printed, so that a failure can be replayed).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cdc_core import failpoint
from cdc_core.changefeed import runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from testkit.concurrent_writer import TABLE as WRITER_TABLE
from testkit.concurrent_writer import ConcurrentWriter, schema_sync_delay, shared_commit_ts
from testkit.e2e import cli as _cli
from testkit.e2e import failpoint_armed, typed_rows_match
from testkit.random_workload import RandomWorkload

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

SEED = int(os.environ.get("CDCFLOW_DIFF_SEED", "20261122"))


def _assert_same(c: UpstreamClient, sink: Path, wl: RandomWorkload, ts: int, where: str,
                 extra: tuple[str, ...] = ()) -> None:
    names = [t.name for t in wl.tables] + list(extra)
    for name in names:
        try:
            typed_rows_match(c, sink, wl.db, name, ts)
        except AssertionError as exc:
            raise AssertionError(f"{where} (seed {SEED}): {exc}") from None
    on_disk = {p.name for p in (sink / wl.db).iterdir() if (p / "_delta_log").is_dir()}
    assert on_disk == set(names), f"{where}: Delta tables {on_disk} (seed {SEED})"


def _create(cdc_home: Path, cid: str, db: str, start: int, dq_mode: str = "checksum",
            deletion_vectors: bool = False) -> Path:
    sink = cdc_home / f"lake-{cid}"
    cfg = cdc_home / f"{cid}.toml"
    cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                   f'[filter]\nrules = ["{db}.*"]\n[data-quality]\nmode = "{dq_mode}"\n'
                   f'[sink]\ndeletion-vectors = {str(deletion_vectors).lower()}\n')
    _cli("changefeed", "create", "--config", str(cfg))
    return sink


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_random_transactions_and_ddl_match_the_upstream_after_every_window(cdc_home: Path, upstream_cluster: Any,
                                                                          deletion_vectors: bool) -> None:
    """...with the silver tables merged copy-on-write, and with deletion vectors (``[sink] deletion-vectors``:
    every window's MERGE marks rows in the files that hold them; the DDL's rewrites read through the vectors)."""
    print(f"seed {SEED}")
    cid = "diff-dv" if deletion_vectors else "diff"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        wl = RandomWorkload(c, "e2e_diff_dv" if deletion_vectors else "e2e_diff", SEED)
        wl.create_initial()
        writer = ConcurrentWriter(upstream_cluster.mysql_addr, wl.db, SEED)
        writer.create()
        sink = _create(cdc_home, cid, wl.db, c.get_ts(), deletion_vectors=deletion_vectors)
        # Four windows of workload and DDL; then, while no row change has shared a DDL's commit ts (a matter of
        # timing: a writer's commit must land inside a DDL's schema sync), windows of DDL only, at most six.
        window = 0
        while window < 4 or (window < 10 and not shared_commit_ts(sink, cid)):
            with writer:
                if window < 4:
                    wl.steps(25)
                with schema_sync_delay(upstream_cluster, 0.2):  # a real cluster's sync, not the 10 ms default
                    for _ in range(3):  # DDL right after DDL: the writer's transactions straddle them
                        wl.ddl()
            t = c.get_ts()
            runner.run_until(cid, t)
            assert load_state(cid).checkpoint_ts == t
            _assert_same(c, sink, wl, t, f"window {window}", extra=(WRITER_TABLE,))
            window += 1
        shared = shared_commit_ts(sink, cid)
        print(f"the concurrent writer committed {writer.commits} transactions in {window} windows; DDL commit ts "
              f"shared by row changes: {shared}")
        assert shared, "no DML committed at a DDL's commit ts: the run did not test their order"
        if deletion_vectors:
            from deltalake import DeltaTable

            marked = sum(DeltaTable(str(p)).deletion_vectors().read_all().num_rows
                         for p in (sink / wl.db).iterdir() if (p / "_delta_log").is_dir())
            assert marked, "no window wrote a deletion vector"
        s = wl.stats
        print(f"{s.txns} transactions ({s.rolled_back} rolled back on a key collision), DDL: {s.ddl}")
        assert s.txns - s.rolled_back >= 50 and len(s.ddl) >= 4, "the workload did too little to prove anything"


def _run_cli(env: dict[str, str], cid: str, until: int, failpoints: str) -> int:
    """`cdcflow changefeed run` in its own process, armed to die (``os._exit(137)``, as SIGKILL) at a failpoint."""
    proc = subprocess.run(
        [sys.executable, "-m", "cdc_core.cli.main", "changefeed", "run", cid, "--until-ts", str(until)],
        env={**env, failpoint.ENV: failpoints, failpoint.ACTION_ENV: "exit"}, capture_output=True, text=True,
        timeout=300,
    )
    if proc.returncode not in (0, failpoint.KILLED_STATUS):
        raise AssertionError(f"changefeed run exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.returncode


def _crash_in_process(monkeypatch: pytest.MonkeyPatch, cid: str, until: int, spec: str) -> bool:
    """Run windows with ``spec`` armed (raise mode); True when the run crashed there."""
    with failpoint_armed(monkeypatch, spec):
        try:
            runner.run_until(cid, until)
            return False
        except failpoint.Crash:
            return True


@pytest.mark.parametrize("writer", ["delta-rs", "delta-spark"])
def test_killed_at_any_point_and_rerun_gives_the_same_tables(cdc_home: Path, upstream_cluster: Any,
                                                            monkeypatch: pytest.MonkeyPatch, writer: str) -> None:
    """Each window is crashed again and again — every re-run dies at a later failpoint, at a random hit —
    before a clean run finishes it; one window dies in a real process. Delta ends equal to the upstream, through
    either Delta writer."""
    rng = random.Random(SEED)
    print(f"seed {SEED}, writer {writer}")
    monkeypatch.setenv("CDCFLOW_DELTA_WRITER", writer)
    cid = "kill" if writer == "delta-rs" else "kill_spark"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        wl = RandomWorkload(c, f"e2e_{cid}", SEED + 1)
        wl.create_initial()
        # DQ "count": the test compares every row itself after each window; the checks still run (and are
        # crashed in), at a third of the cost.
        sink = _create(cdc_home, cid, wl.db, c.get_ts(), dq_mode="count")
        # A small delta-spark MERGE costs ~20x a delta-rs one (test_bench_small_window_per_writer): one crashed
        # window through it, two through the default writer.
        for window in range(2 if writer == "delta-rs" else 1):
            wl.steps(8, ddl_share=0.0)
            wl.ddl()  # a barrier inside the window, so that every failpoint is on the way
            wl.steps(4, ddl_share=0.0)
            t = c.get_ts()
            # In the order of a window's phases, so that each re-run gets further than the one before (a re-run
            # skips what is done; a table commit may be the first or the second one left); each point kept at
            # random.
            chain = ["pull.bronze_written=1", f"apply.table_committed={rng.randint(1, 2)}",
                     "apply.table_committed=1", "apply.dml_step_done=1", "apply.ddl_applied=1",
                     "apply.table_committed=1", "check.done=1", "publish.before_checkpoint=1"]
            points = [p for p in chain if rng.random() < 0.85]
            crashed = []
            for spec in points:
                before = load_state(cid).checkpoint_ts
                if _crash_in_process(monkeypatch, cid, t, spec):
                    crashed.append(spec)
                    st = load_state(cid)
                    # A crashed run never moves the checkpoint past what it finished, nor into error.
                    assert before <= st.checkpoint_ts < t and st.state == "normal", (spec, st)
                elif load_state(cid).checkpoint_ts == t:
                    break  # the window got through before this point's turn came
            print(f"window {window}: crashed at {crashed}")
            assert len(crashed) >= 4, f"window {window}: too few failpoints reached ({crashed} of {points})"
            runner.run_until(cid, t)
            assert load_state(cid).checkpoint_ts == t
            _assert_same(c, sink, wl, t, f"window {window} after crashes at {crashed}")

        # The real thing once: a separate process dies at a random failpoint; this process finishes the window.
        wl.steps(8, ddl_share=0.0)
        wl.ddl()
        wl.steps(4, ddl_share=0.0)
        t = c.get_ts()
        spec = f"{rng.choice(failpoint.POINTS)}=1"
        env = {**os.environ, "CDCFLOW_UPSTREAM": upstream_cluster.pd_addr}
        assert _run_cli(env, cid, t, spec) == failpoint.KILLED_STATUS, spec
        assert load_state(cid).checkpoint_ts < t
        runner.run_until(cid, t)
        assert load_state(cid).checkpoint_ts == t
        _assert_same(c, sink, wl, t, f"after a process died at {spec}")
