"""The transaction mode rules (``cdc_core/upstream/sql/txn_mode.py``) as TiDB v8.5's sysvars and session keep them:
defaults, validation of ``tidb_txn_mode`` and ``innodb_lock_wait_timeout``, which mode BEGIN and autocommit take,
the SET forms read, and ``@@global`` reads."""

from __future__ import annotations

from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from cdc_core.upstream.sql import txn_mode
from cdc_core.upstream.sql.sql_front import split_script
from cdc_core.upstream.sql.txn_mode import TxnModeError, TxnSettings


def _set(sql: str) -> exp.Set:
    node = sqlglot.parse_one(sql, read="mysql")
    assert isinstance(node, exp.Set)
    return node


def test_defaults_are_tidbs() -> None:
    s = TxnSettings()
    assert (s.txn_mode, s.lock_wait_timeout) == ("pessimistic", 50)
    assert txn_mode.RETRY_LIMIT == 10 and txn_mode.MAX_PESSIMISTIC_RETRIES == 256
    assert txn_mode.PESSIMISTIC_AUTO_COMMIT is False


def test_tidb_txn_mode_is_an_enum_that_allows_empty() -> None:
    assert txn_mode.normalize_mode("PESSIMISTIC") == "pessimistic"
    assert txn_mode.normalize_mode("Optimistic") == "optimistic"
    assert txn_mode.normalize_mode("") == ""
    with pytest.raises(TxnModeError) as ei:
        txn_mode.normalize_mode("lazy")
    assert (ei.value.code, ei.value.message) == (1231, "Variable 'tidb_txn_mode' can't be set to the value of 'lazy'")


def test_innodb_lock_wait_timeout_is_clamped_and_integer() -> None:
    assert [txn_mode.normalize_lock_wait_timeout(v) for v in (0, 1, "5", 3600, 99999)] == [1, 1, 5, 3600, 3600]
    for bad in ("x", 1.5, True, None):
        with pytest.raises(TxnModeError) as ei:
            txn_mode.normalize_lock_wait_timeout(bad)
        assert ei.value.code == 1232


def test_which_mode_a_transaction_takes() -> None:
    assert txn_mode.begin_pessimistic("pessimistic", []) is True  # BEGIN, START TRANSACTION
    assert txn_mode.begin_pessimistic("optimistic", []) is False
    assert txn_mode.begin_pessimistic("", []) is False  # '' is optimistic
    assert txn_mode.begin_pessimistic("optimistic", ["PESSIMISTIC"]) is True
    assert txn_mode.begin_pessimistic("pessimistic", ["OPTIMISTIC"]) is False
    assert txn_mode.autocommit_pessimistic("pessimistic") is False  # pessimistic-auto-commit off


def test_set_forms_scopes_and_values() -> None:
    ours, others = txn_mode.assignments(_set(
        "SET GLOBAL tidb_txn_mode = 'optimistic', @@session.innodb_lock_wait_timeout = 3, @@x = 1"))
    assert [(scope, name) for scope, name, _ in ours] == [("GLOBAL", "tidb_txn_mode"),
                                                         ("SESSION", "innodb_lock_wait_timeout")]
    assert len(others) == 1
    session, global_ = TxnSettings("optimistic", 7), TxnSettings()
    values = [txn_mode.evaluate(v, name=n, scope=sc, session=session, global_=global_) for sc, n, v in ours]
    assert values == ["optimistic", 3]
    (_, name, value), = txn_mode.assignments(_set("SET tidb_txn_mode = DEFAULT"))[0]
    assert txn_mode.evaluate(value, name=name, scope="SESSION", session=session, global_=global_) == "pessimistic"
    (scope, name, value), = txn_mode.assignments(_set("SET @@global.innodb_lock_wait_timeout = DEFAULT"))[0]
    assert txn_mode.evaluate(value, name=name, scope=scope, session=session, global_=global_) == 50
    (_, name, value), = txn_mode.assignments(_set("SET tidb_txn_mode = pessimistic"))[0]  # a bare word
    assert txn_mode.evaluate(value, name=name, scope="SESSION", session=session, global_=global_) == "pessimistic"
    (_, name, value), = txn_mode.assignments(_set("SET innodb_lock_wait_timeout = @@innodb_lock_wait_timeout"))[0]
    assert txn_mode.evaluate(value, name=name, scope="SESSION", session=session, global_=global_) == 7


def test_global_reads_are_the_global_values() -> None:
    node = sqlglot.parse_one("SELECT @@global.tidb_txn_mode, @@tidb_txn_mode, @@global.innodb_lock_wait_timeout",
                             read="mysql")
    out = txn_mode.with_global_values(node, TxnSettings("optimistic", 9))
    assert out.sql(dialect="mysql") == ("SELECT 'optimistic' AS `@@global.tidb_txn_mode`, @@tidb_txn_mode, "
                                        "9 AS `@@global.innodb_lock_wait_timeout`")


def test_a_sql_front_session_sets_and_takes_them(upstream_cluster: Any) -> None:
    """The SQL front's own sessions (what ``cdcflow upstream sql`` runs) read the same SETs as the MySQL front."""
    engine = upstream_cluster.cluster.sql

    async def scenario() -> tuple[bool, bool, int, str]:
        s = engine.session()
        for st in split_script("SET tidb_txn_mode = 'optimistic'; SET GLOBAL innodb_lock_wait_timeout = 7; BEGIN"):
            await s.run(st)
        optimistic_txn = s.txn is not None and not s.txn.pessimistic
        s.close()
        later = engine.session()
        await later.run(split_script("BEGIN")[0])
        pessimistic_txn = later.txn is not None and later.txn.pessimistic
        timeout = later.txn.lock_wait_timeout if later.txn is not None else 0
        later.close()
        await later.run(split_script("SET GLOBAL innodb_lock_wait_timeout = DEFAULT")[0])
        return optimistic_txn, pessimistic_txn, int(timeout), s.txn_settings.txn_mode

    assert upstream_cluster.run(scenario()) == (True, True, 7, "optimistic")
    assert engine.global_txn == TxnSettings()
