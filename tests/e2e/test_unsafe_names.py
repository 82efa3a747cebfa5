"""Every name and value TiDB allows is safe (issue 52 item 6), end to end against the embedded upstream: a database
and tables whose names hold backticks, quotes, backslashes, dots, slashes, spaces and non-ASCII text, columns named
with what delta-spark refuses in a table it creates, a database named ``_cdcflow``, and keys holding quotes,
backslashes and non-ASCII text are replicated through windows checked in ``checksum`` mode -- part of the run under
a GLOBAL sql_mode with NO_BACKSLASH_ESCAPES, so that every session started then, cdcflow's own included, reads a
backslash as an ordinary character -- with a RENAME TABLE and a DROP TABLE of such tables; Delta equals the upstream,
every path is inside the sink, and cdcflow's own ``<sink>/_cdcflow`` is not the database of that name. A name the
lake cannot hold is refused at ``changefeed create``, naming the table."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from typer.testing import CliRunner

from cdc_core.changefeed import runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.codec.sink_uri import table_path_of
from cdc_core.codec.sql_ident import quote_ident, quote_table
from cdc_core.errors import ChangefeedError
from spark_jobs.load.table_moves import dropped_path, read_move
from testkit.e2e import cli, cli_app, typed_rows_match

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

DB = "e2e_names`.db/ x'\"\\é"
OWN = "_cdcflow"  # a database with the name of cdcflow's own directory in the sink
KEYED = "t`a.b/c d'\"\\ü中"  # keyed by a string
NUMBERED = "r/2 ..x"  # keyed by an integer; its columns named with what delta-spark refuses in a table it creates
RENAMED = "moved `t` ./中"
CHANGELOG = "changelog"  # in _cdcflow: the name of cdcflow's own <sink>/_cdcflow/changelog
CID = "unsafe-names"
KEYS = ["it's", "a\\b", "\\", "'\\'", "x\\'y", "中文\\n", "back`tick", 'dq"', "\\%_", "end\\"]
K, V, N = quote_ident("k"), quote_ident("v.a`l"), quote_ident("n m")


@pytest.fixture
def upstream(upstream_cluster: Any) -> Iterator[UpstreamClient]:
    """A client of the session's upstream; the GLOBAL sql_mode the test changes is put back after it."""
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        before = c.query("SELECT @@global.sql_mode AS m")[0]["m"]
        try:
            yield c
        finally:
            c.execute(f"SET GLOBAL sql_mode = {c.literal(before)}")


def _dml(c: UpstreamClient, r: int) -> None:
    """Inserts, updates (one moving a string key), deletes in every table; every string written as the client's
    session reads it (``c.literal``: by its sql_mode)."""
    lit = c.literal
    keyed, numbered, own = quote_table(DB, KEYED), quote_table(DB, NUMBERED), quote_table(OWN, CHANGELOG)
    c.execute(f"INSERT INTO {keyed} VALUES " + ", ".join(
        f"({lit(key + str(r))}, {i}, {lit('n ' + key)})" for i, key in enumerate(KEYS)))
    c.execute(f"UPDATE {keyed} SET {V} = -1 WHERE {K} = {lit(KEYS[1] + str(r))}; "
              f"UPDATE {keyed} SET {K} = {lit('moved' + str(r) + KEYS[2])} WHERE {K} = {lit(KEYS[0] + str(r))}; "
              f"DELETE FROM {keyed} WHERE {K} = {lit(KEYS[3] + str(r))}")
    c.execute(f"INSERT INTO {numbered} VALUES " + ", ".join(f"({r * 100 + i}, {i}, {lit(KEYS[i])})" for i in range(5))
              + f"; UPDATE {numbered} SET {quote_ident('a b=c')} = 7 WHERE id = {r * 100 + 1}; "
              f"DELETE FROM {numbered} WHERE id = {r * 100 + 2}")
    c.execute(f"INSERT INTO {own} VALUES ({r}, {lit(KEYS[r])})")


def _equal(c: UpstreamClient, sink: Path, tables: list[tuple[str, str]]) -> None:
    """Delta equals the upstream at the checkpoint, value by value, for each table."""
    at = load_state(CID).checkpoint_ts
    for db, table in tables:
        assert typed_rows_match(c, sink, db, table, at) > 0, (db, table)


def _checked(results: list[dict[str, Any]]) -> set[str]:
    """The tables the windows' checks covered; every check passed."""
    out: set[str] = set()
    for r in results:
        check = r.get("check") or {}
        if check.get("tables"):
            assert check["passed"], check
            out.update(check["tables"])
    return out


def test_names_and_keys_of_any_characters_replicate_checked_and_equal(cdc_home: Path, upstream_cluster: Any,
                                                                     upstream: UpstreamClient) -> None:
    sink, c = cdc_home / "lake", upstream
    c.execute(f"CREATE DATABASE {quote_ident(DB)}; CREATE DATABASE IF NOT EXISTS {quote_ident(OWN)}; "
              f"CREATE TABLE {quote_table(DB, KEYED)} ({K} VARCHAR(32) PRIMARY KEY, {V} INT, {N} VARCHAR(32)); "
              f"CREATE TABLE {quote_table(DB, NUMBERED)} (id INT PRIMARY KEY, {quote_ident('a b=c')} INT, "
              f"{quote_ident('x;{y}(z)')} VARCHAR(32)); "
              f"CREATE TABLE {quote_table(OWN, CHANGELOG)} (id INT PRIMARY KEY, v VARCHAR(32))")
    start = c.get_ts()
    cfg = cdc_home / f"{CID}.toml"
    cfg.write_text(f'changefeed-id = "{CID}"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                   '[filter]\nrules = ["e2e_names*.*", "_cdcflow.changelog"]\n[data-quality]\nmode = "checksum"\n')
    cli("changefeed", "create", "--config", str(cfg))

    # Under the default sql_mode: a backslash escapes in a literal.
    _dml(c, 1)
    assert _checked(runner.run_until(CID, c.get_ts())) == {f"{DB}.{KEYED}", f"{DB}.{NUMBERED}", f"{OWN}.{CHANGELOG}"}
    _equal(c, sink, [(DB, KEYED), (DB, NUMBERED), (OWN, CHANGELOG)])

    # Under NO_BACKSLASH_ESCAPES, taken by every session started from now on, cdcflow's checks' own: a backslash
    # is an ordinary character, and a literal written for the default mode would be another value.
    c.execute("SET GLOBAL sql_mode = CONCAT(@@global.sql_mode, ',NO_BACKSLASH_ESCAPES')")
    with UpstreamClient(upstream_cluster.pd_addr) as nbe:
        assert nbe.sql().no_backslash_escapes and nbe.literal("a\\b") == "'a\\b'"
        _dml(nbe, 2)
        # a RENAME TABLE and a DROP TABLE of such tables, with row changes around them
        nbe.execute(f"RENAME TABLE {quote_table(DB, KEYED)} TO {quote_table(DB, RENAMED)}")
        nbe.execute(f"INSERT INTO {quote_table(DB, RENAMED)} VALUES ({nbe.literal('after' + KEYS[2])}, 9, NULL)")
        kept = nbe.query(f"SELECT COUNT(*) AS n FROM {quote_table(DB, NUMBERED)}")[0]["n"]
        (dropped,) = nbe.execute(f"DROP TABLE {quote_table(DB, NUMBERED)}")
        nbe.execute(f"UPDATE {quote_table(OWN, CHANGELOG)} SET v = {nbe.literal(KEYS[4])} WHERE id = 1")
        assert {f"{DB}.{RENAMED}", f"{OWN}.{CHANGELOG}"} <= _checked(runner.run_until(CID, nbe.get_ts()))
        _equal(nbe, sink, [(DB, RENAMED), (OWN, CHANGELOG)])

    # And back under the default mode for the last window; `verify` (its chunked checksums) finds no difference.
    c.execute("SET GLOBAL sql_mode = DEFAULT")
    with UpstreamClient(upstream_cluster.pd_addr) as plain:
        assert not plain.sql().no_backslash_escapes
        plain.execute(f"UPDATE {quote_table(DB, RENAMED)} SET {N} = {plain.literal(KEYS[9])} WHERE {V} = 9; "
                      f"INSERT INTO {quote_table(OWN, CHANGELOG)} VALUES (99, {plain.literal(KEYS[5])})")
        assert _checked(runner.run_until(CID, plain.get_ts())) == {f"{DB}.{RENAMED}", f"{OWN}.{CHANGELOG}"}
        _equal(plain, sink, [(DB, RENAMED), (OWN, CHANGELOG)])
    cli("verify", CID)  # exits non-zero on a difference

    # Every path is inside the sink, under the names' components; cdcflow's own directory is its own.
    uri = f"file://{sink}"
    assert sorted(os.listdir(sink)) == ["_cdcflow", "e2e_names~60.db~2F~20x~27~22~5Cé", "~5Fcdcflow"]
    assert os.path.isdir(table_path_of(uri, DB, RENAMED)) and not os.path.exists(table_path_of(uri, DB, KEYED))
    assert DeltaTable(table_path_of(uri, OWN, CHANGELOG)).count() == 3
    assert (sink / "_cdcflow" / "changelog" / f"changefeed={CID}").is_dir()
    copy = dropped_path(uri, DB, NUMBERED, dropped.commit_ts)
    assert copy.startswith(f"{sink}/_cdcflow/dropped/") and DeltaTable(copy).count() == kept
    assert read_move(uri, DB, NUMBERED)["ts"] == dropped.commit_ts
    assert read_move(uri, DB, KEYED)["to"] == table_path_of(uri, DB, RENAMED)


def test_a_name_the_lake_cannot_hold_is_refused_at_create(cdc_home: Path, upstream: UpstreamClient) -> None:
    db, long = "e2e_refused_names", "€" * 64  # 576 bytes as a path component (each € three escaped bytes)
    upstream.execute(f"CREATE DATABASE {quote_ident(db)}; CREATE TABLE {quote_table(db, long)} (id INT PRIMARY KEY)")
    cfg = cdc_home / "refused.toml"
    cfg.write_text(f'changefeed-id = "refused"\nsink-uri = "file://{cdc_home}/lake"\n[filter]\nrules = ["{db}.*"]\n')
    res = CliRunner().invoke(cli_app(), ["changefeed", "create", "--config", str(cfg)])
    assert res.exit_code != 0 and isinstance(res.exception, ChangefeedError), res.output
    assert f"table '{db}.{long}'" in str(res.exception) and "more than the 255" in str(res.exception)
    assert not (cdc_home / "home" / "changefeeds" / "refused.toml").exists()
