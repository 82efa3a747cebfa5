"""Commit ts as TiKV gives them with async commit and 1PC (TiDB's defaults): from the store's ``max_ts``, raised by
every read and by every resolved ts before it is published; so that two transactions, and a transaction and a DDL,
can share a commit ts, and none goes at or below a ts something read at or was promised."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from cdc_core.codec import key as keycodec
from cdc_core.codec.tso import MAX_TS
from cdc_core.schema import ddl_history
from cdc_core.upstream.cluster import Cluster, ClusterConfig
from cdc_core.upstream.sql.sql_front import Session, split_script
from cdc_core.upstream.sql.txn import ASYNC_COMMIT_KEYS_LIMIT, CommitMode, CommitOptions, Transaction
from cdc_core.upstream.store.concurrency_manager import ConcurrencyManager
from cdc_core.upstream.store.mvcc import Mutation, MvccStore, Op


def test_max_ts_only_rises_and_ignores_the_largest_ts() -> None:
    cm = ConcurrencyManager()
    assert cm.async_commit_ts(10) == 11
    cm.update_max_ts(20)
    cm.update_max_ts(15)
    assert cm.max_ts == 20 and cm.async_commit_ts(10) == 21 and cm.async_commit_ts(30) == 31
    assert cm.async_commit_ts(10, for_update_ts=40) == 41
    cm.update_max_ts(MAX_TS)  # a read of "the latest" (TiKV ignores TimeStamp::max())
    assert cm.max_ts == 20


def test_reads_and_published_resolved_ts_push_async_commits_above_them() -> None:
    s = MvccStore()
    s.prewrite([Mutation(b"a", Op.PUT, b"1")], b"a", 5)
    assert s.get(b"z", 40) is None  # a read at 40: the commit goes above it, never below what it missed
    assert s.commit_async([b"a"], 5) == 41
    assert list(s.iter_scan(b"", b"", 50)) == [(b"a", b"1")]
    assert s.count(b"", b"", 60) == 1
    s.update_max_ts(70)  # a resolved ts about to be published
    assert s.commit_one_pc([Mutation(b"b", Op.PUT, b"2")], 6) == 71
    assert [(v.commit_ts, v.value) for v in s.versions(b"b")] == [(71, b"2")]
    # two transactions with no read between them share a commit ts
    assert s.commit_one_pc([Mutation(b"c", Op.PUT, b"3")], 7) == 71


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """The embedded cluster's parts, not started: no resolved-ts ticks or PD reports raise max_ts behind the
    test's back, so where a commit ts lands is exact."""
    yield Cluster(ClusterConfig(stores=1, regions_per_table=2))


async def _run(s: Session, sql: str) -> list[int]:
    return [(await s.run(st)).commit_ts for st in split_script(sql)]


def test_transactions_with_no_read_between_them_share_a_commit_ts(cluster: Cluster) -> None:
    """Autocommit statements (no linearizability asked: each start ts came from PD after every earlier commit) and
    explicit transactions under ``tidb_guarantee_linearizability = OFF`` commit at ``max_ts + 1``, the same ts
    when no read came between them."""

    async def scenario() -> tuple[list[int], list[int]]:
        setup = cluster.sql.session()
        await _run(setup, "CREATE DATABASE d; USE d; CREATE TABLE a (id INT PRIMARY KEY); "
                          "CREATE TABLE b (id INT PRIMARY KEY)")
        s1, s2 = cluster.sql.session(), cluster.sql.session()
        auto = await asyncio.gather(_run(s1, "INSERT INTO d.a VALUES (1)"), _run(s2, "INSERT INTO d.b VALUES (1)"))
        s1.guarantee_linearizability = s2.guarantee_linearizability = False
        await _run(s1, "BEGIN; INSERT INTO d.a VALUES (2)")
        await _run(s2, "BEGIN; INSERT INTO d.b VALUES (2)")
        causal = await asyncio.gather(_run(s1, "COMMIT"), _run(s2, "COMMIT"))
        assert s1.last_commit_mode is s2.last_commit_mode is CommitMode.ONE_PC
        return [c[0] for c in auto], [c[0] for c in causal]

    auto, causal = asyncio.run(scenario())
    assert auto[0] == auto[1] > 0 and causal[0] == causal[1] > auto[0]


def test_an_explicit_transaction_commits_above_every_ts_pd_gave_before_its_commit(cluster: Cluster) -> None:
    """tidb_guarantee_linearizability (ON by default): an explicit transaction's 1PC or async commit fetches a PD
    ts before its prewrite and commits above it, so a transaction that began after this one's COMMIT was sent
    never sees a commit ts below its start ts. Off, the commit ts is ``max_ts + 1``, below that PD ts."""

    async def commit_ts(linearizable: bool, values: str) -> tuple[int, int, CommitMode | None]:
        s = cluster.sql.session()
        s.guarantee_linearizability = linearizable
        await _run(s, f"BEGIN; INSERT INTO d.t VALUES {values}")
        later = cluster.tso.next()  # another client's start ts, no read: max_ts stays
        [ts] = await _run(s, "COMMIT")
        return ts, later, s.last_commit_mode

    async def scenario() -> dict[tuple[bool, str], tuple[int, int, CommitMode | None]]:
        # split at handle 0: -1 and 1 are in two regions (async commit), 1 and 2 in one (1PC)
        await _run(cluster.sql.session(), "CREATE DATABASE d; USE d; CREATE TABLE t (id INT PRIMARY KEY)")
        return {(lin, values): await commit_ts(lin, values)
                for lin, values in ((True, "(1), (2)"), (True, "(-1), (3)"), (False, "(4), (5)"),
                                    (False, "(-2), (6)"))}

    out = asyncio.run(scenario())
    for (linearizable, values), (ts, later, mode) in out.items():
        assert mode is (CommitMode.ASYNC_COMMIT if values.startswith("(-") else CommitMode.ONE_PC)
        assert (ts > later) is linearizable, (linearizable, values, ts, later)


def test_a_dml_commit_can_share_the_commit_ts_of_a_ddl_it_raced(cluster: Cluster) -> None:
    """A transaction whose COMMIT is on its way while a DDL of another table runs commits at the DDL's ts: under
    linearizability it fetched PD's ts ``L`` and asks for ``L + 1``; the job's transaction started at the next
    ts and read the meta there (``max_ts``), PD gave its commit the one after, ``L + 2``; the 1PC commit takes
    ``max_ts + 1`` -- the same. Without linearizability, the same happens to a COMMIT sent just after the job."""

    async def scenario() -> list[tuple[int, int, int]]:
        setup = cluster.sql.session()
        await _run(setup, "CREATE DATABASE d; USE d; CREATE TABLE a (id INT PRIMARY KEY); "
                          "CREATE TABLE b (id INT PRIMARY KEY, v INT)")
        out = []
        for i, linearizable in enumerate((True, False)):
            dml, ddl = cluster.sql.session(), cluster.sql.session()
            dml.guarantee_linearizability = linearizable
            await _run(dml, f"BEGIN; INSERT INTO d.a VALUES ({i})")
            alter = _run(ddl, f"ALTER TABLE d.b ADD COLUMN w{i} INT")
            # the tasks start in order: the COMMIT runs up to its request to the store, then the whole job commits
            if linearizable:
                [commit_ts], [ddl_ts] = await asyncio.gather(_run(dml, "COMMIT"), alter)
            else:
                [ddl_ts], [commit_ts] = await asyncio.gather(alter, _run(dml, "COMMIT"))
            assert dml.last_commit_mode is CommitMode.ONE_PC
            job = max(ddl_history.jobs_from_sql(
                (await setup.run(split_script("SELECT job_meta FROM mysql.tidb_ddl_history")[0])).rows, 0),
                key=lambda j: j.job_id)
            out.append((ddl_ts, commit_ts, job.finished_ts))
        return out

    for ddl_ts, commit_ts, finished in asyncio.run(scenario()):
        assert commit_ts == ddl_ts == finished


def test_the_commit_mode_is_tidbs_choice(cluster: Cluster) -> None:
    """1PC when one region holds every key, async commit across regions, 2PC past client-go's limits or with both
    switched off (tidb_enable_1pc / tidb_enable_async_commit)."""

    async def scenario() -> dict[str, CommitMode | None]:
        s = cluster.sql.session()
        await _run(s, "CREATE DATABASE d; USE d; CREATE TABLE t (id INT PRIMARY KEY, v INT)")  # split at handle 0
        out: dict[str, CommitMode | None] = {}
        for name, sql in (("one region", "INSERT INTO t VALUES (1, 1), (2, 2)"),
                          ("two regions", "INSERT INTO t VALUES (-1, 1), (3, 3)"),
                          ("too many keys", "INSERT INTO t VALUES " + ", ".join(
                              f"({i}, 0)" for i in range(10, 11 + ASYNC_COMMIT_KEYS_LIMIT)))):
            await _run(s, sql)
            out[name] = s.last_commit_mode
        s.commit_options = CommitOptions(async_commit=False, one_pc=False)
        await _run(s, "UPDATE t SET v = 9 WHERE id = 1")
        out["switched off"] = s.last_commit_mode
        return out

    assert asyncio.run(scenario()) == {"one region": CommitMode.ONE_PC, "two regions": CommitMode.ASYNC_COMMIT,
                                      "too many keys": CommitMode.TWO_PC, "switched off": CommitMode.TWO_PC}


def test_a_two_pc_commit_takes_its_ts_from_pd_after_the_prewrite(cluster: Cluster) -> None:
    store, tso = cluster.store, cluster.tso
    txn = Transaction(store, tso, options=CommitOptions(async_commit=False, one_pc=False))
    key = keycodec.row_key(1000, 1)
    txn.put(key, b"v")
    store.update_max_ts(txn.start_ts + 1000)  # max_ts does not matter to a 2PC commit
    ts = asyncio.run(txn.commit())
    assert txn.commit_mode is CommitMode.TWO_PC and ts == tso.last() and ts < txn.start_ts + 1000
