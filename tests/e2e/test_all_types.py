"""End to end with a table of every MySQL type TiDB supports: rows written before start-ts arrive through the
initial snapshot (SQL reads, typed Arrow), later changes through the change feed (TiDB rowcodec v2 values decoded
in the Spark job), a type-widening MODIFY COLUMN and an ADD COLUMN apply at their barriers; after every window the
Delta table equals the upstream snapshot value by value, and the checksum checks (Python over the upstream rows,
Spark over Delta) agree."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cdc_core.changefeed import runner
from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from testkit.e2e import cli as _cli
from testkit.e2e import typed_rows_match

pytestmark = [pytest.mark.e2e, pytest.mark.spark]

DB = "e2e_types"
DDL = f"""CREATE TABLE {DB}.ty (
    id INT PRIMARY KEY, ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT UNSIGNED, i INT,
    iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED, f FLOAT, d DOUBLE, dc DECIMAL(30,10), dt DATE,
    dtm DATETIME(6), ts TIMESTAMP(3), tm TIME(2), y YEAR, c CHAR(4), vc VARCHAR(16), b BINARY(4),
    vb VARBINARY(8), tt TINYTEXT, tx TEXT, mt MEDIUMTEXT, lt LONGTEXT, tb TINYBLOB, bl BLOB, mb MEDIUMBLOB,
    lb LONGBLOB, e ENUM('small','medium','large'), s SET('a','b','c','d'), bt BIT(12), j JSON,
    UNIQUE KEY uk (vc, dt, tm))"""
_LETTERS = "abcxyzé ü"


def _text(r: random.Random, n: int) -> str:
    return "'" + "".join(r.choice(_LETTERS) for _ in range(r.randint(0, n))).strip() + "'"


def _literal(r: random.Random, name: str) -> str:
    """A random SQL literal for column ``name`` (10% NULL except the key columns)."""
    if name not in ("vc", "dt", "tm") and r.random() < 0.1:
        return "NULL"
    v: dict[str, Any] = {
        "ti": lambda: r.randint(-128, 127), "tiu": lambda: r.choice([0, 255, r.randint(0, 255)]),
        "si": lambda: r.randint(-32768, 32767), "mi": lambda: r.randint(0, (1 << 24) - 1),
        "i": lambda: r.randint(-(1 << 31), (1 << 31) - 1), "iu": lambda: r.randint(0, (1 << 32) - 1),
        "bi": lambda: r.choice([-(1 << 63), r.randint(-(1 << 63), (1 << 63) - 1)]),
        "biu": lambda: r.choice([(1 << 64) - 1, r.randint(0, (1 << 64) - 1)]),
        "f": lambda: f"{r.uniform(-1e6, 1e6):.3f}", "d": lambda: repr(r.uniform(-1, 1) * 10 ** r.randint(-30, 30)),
        "dc": lambda: f"{r.randint(-10**19, 10**19)}.{r.randint(0, 10**10 - 1):010d}",
        "dt": lambda: f"'{r.randint(1000, 9999)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}'",
        "dtm": lambda: f"'{r.randint(1, 9999):04d}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} "
                       f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 999999)}'",
        "ts": lambda: f"'{r.randint(1971, 2037)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} "
                      f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 9999)}'",
        "tm": lambda: f"'{r.choice(['-', ''])}{r.randint(0, 838)}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}"
                      f".{r.randint(0, 99):02d}'",
        "y": lambda: r.choice([0, r.randint(1901, 2155)]), "c": lambda: _text(r, 4), "vc": lambda: _text(r, 16),
        "b": lambda: f"x'{r.randbytes(r.randint(0, 4)).hex()}'",
        "vb": lambda: f"x'{r.randbytes(r.randint(0, 8)).hex()}'",
        "tt": lambda: _text(r, 40), "tx": lambda: _text(r, 80), "mt": lambda: _text(r, 8), "lt": lambda: _text(r, 8),
        "tb": lambda: f"x'{r.randbytes(r.randint(0, 9)).hex()}'", "bl": lambda: f"x'{r.randbytes(40).hex()}'",
        "mb": lambda: "0x00ff", "lb": lambda: "''",
        "e": lambda: r.choice(["'small'", "'MEDIUM'", "'large'", "2"]),
        "s": lambda: "'" + ",".join(r.sample("abcd", r.randint(0, 4))) + "'",
        "bt": lambda: f"b'{r.getrandbits(12):b}'",
        "j": lambda: "'" + json.dumps(r.choice([None, r.random(), {"k": [1, "two", None, True], "a": r.randint(0, 9)},
                                                 ["ü", {"z": {}}]])) + "'",
    }
    return str(v[name]())


COLUMNS = ("ti", "tiu", "si", "mi", "i", "iu", "bi", "biu", "f", "d", "dc", "dt", "dtm", "ts", "tm", "y", "c", "vc",
           "b", "vb", "tt", "tx", "mt", "lt", "tb", "bl", "mb", "lb", "e", "s", "bt", "j")


def _rows(r: random.Random, ids: range) -> str:
    # A distinct vc per row keeps the unique key (vc, dt, tm) free of collisions.
    return ", ".join("(" + ", ".join([str(i)] + [f"'k{i}'" if n == "vc" else _literal(r, n) for n in COLUMNS]) + ")"
                     for i in ids)


def _same(c: UpstreamClient, sink: Path, ts: int) -> int:
    return typed_rows_match(c, sink, DB, "ty", ts)


def test_every_type_replicates_with_its_documented_delta_type(cdc_home: Path, upstream_cluster: Any) -> None:
    r = random.Random(17)
    sink = cdc_home / "lake-types"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {DB}; {DDL}")
        c.execute(f"INSERT INTO {DB}.ty VALUES {_rows(r, range(1, 151))}")
        start_ts = c.get_ts()
        cfg = cdc_home / "types.toml"
        cfg.write_text(f'changefeed-id = "types"\nsink-uri = "file://{sink}"\nstart-ts = {start_ts}\n'
                       f'initial-snapshot = true\n[filter]\nrules = ["{DB}.*"]\n[data-quality]\nmode = "checksum"\n')
        _cli("changefeed", "create", "--config", str(cfg))

        # Window 1: the snapshot of 150 rows, then inserts, updates of every column, a key move and deletes.
        c.execute(f"""
            INSERT INTO {DB}.ty VALUES {_rows(r, range(151, 301))};
            UPDATE {DB}.ty SET f = f * 2, d = -d, dc = dc / 3, dtm = '2000-01-01 00:00:00.000001', tm = '-00:00:01',
                               e = 'large', s = 'd,a', bt = b'1', j = '[]', b = x'ff', c = 'zz  ' WHERE id % 7 = 0;
            UPDATE {DB}.ty SET id = id + 1000 WHERE id % 11 = 0;
            DELETE FROM {DB}.ty WHERE id % 13 = 0;
        """)
        t1 = c.get_ts()
        runner.run_until("types", t1)
        assert load_state("types").checkpoint_ts == t1
        n1 = _same(c, sink, t1)
        assert n1 > 250
        schema = DeltaTable(str(sink / DB / "ty")).to_pyarrow_table().schema
        assert {f.name: str(f.type) for f in schema if f.name in ("tiu", "biu", "ts", "tm", "bt", "e", "j")} == {
            "tiu": "int16", "biu": "decimal128(20, 0)", "ts": "timestamp[us, tz=UTC]", "tm": "int64",
            "bt": "binary", "e": "string", "j": "string"}

        # Window 2: DDL at barriers (a widening MODIFY TiDB reorganizes under a new column id, an ENUM member
        # appended, a NOT NULL JSON column added) with rows on both sides of them.
        c.execute(f"""
            UPDATE {DB}.ty SET tiu = 200 WHERE id < 20;
            ALTER TABLE {DB}.ty MODIFY COLUMN tiu SMALLINT;
            UPDATE {DB}.ty SET tiu = -300 WHERE id < 10;
            ALTER TABLE {DB}.ty MODIFY COLUMN e ENUM('small','medium','large','huge');
            UPDATE {DB}.ty SET e = 'huge' WHERE id % 5 = 0;
            ALTER TABLE {DB}.ty ADD COLUMN extra JSON NOT NULL;
            INSERT INTO {DB}.ty (id, vc, dt, tm, extra) VALUES (5000, 'new', '2024-01-01', '00:00:00', '{{"x": 1}}');
        """)
        t2 = c.get_ts()
        runner.run_until("types", t2)
        assert load_state("types").checkpoint_ts == t2
        assert _same(c, sink, t2) == n1 + 1
        q = json.loads(_cli("changefeed", "query", "types"))
        assert all(res["passed"] for res in q["last_checks"]["tables"].values()), q["last_checks"]
        schema = DeltaTable(str(sink / DB / "ty")).to_pyarrow_table().schema
        assert str(schema.field("tiu").type) == "int16" and str(schema.field("extra").type) == "string"
        _cli("verify", "types")


MDB = "e2e_mapped"


def _mapped_ddl(db: str) -> str:
    return (f"CREATE TABLE {db}.m (id INT PRIMARY KEY, v VECTOR(3), w VECTOR, dw DECIMAL(65,30), "
            "d DATE NOT NULL, dtm DATETIME(3), ts TIMESTAMP NULL);"
            f"CREATE TABLE {db}.p (id BIGINT PRIMARY KEY, d DATE, dtm DATETIME, dw DECIMAL(50,4))")
# TiDB's permissive sql_mode: the zero date, zero months or days and invalid days are stored as written
PERMISSIVE = "SET sql_mode = 'ALLOW_INVALID_DATES'"
_DATES = ["'0000-00-00'", "'2021-00-10'", "'2021-07-00'", "'2021-02-30'", "'0000-03-04'", "'2024-02-29'",
          "'1999-12-31'"]


def _mapped_literals(r: random.Random, table: str) -> dict[str, str]:
    def vec(n: int) -> str:
        return "'[" + ",".join(r.choice(["-0", "0.1", repr(r.uniform(-1e6, 1e6)), "3e38"]) for _ in range(n)) + "]'"

    def wide(ints: int, frac: int) -> str:
        return r.choice(["NULL", f"{r.choice(['-', ''])}{r.randint(0, 10**ints - 1)}.{r.randint(0, 10**frac - 1)}"])

    d = r.choice(_DATES)
    dtm = r.choice(["NULL", "'0000-00-00 00:00:00'", "'2021-05-00 10:11:12.5'", "'2024-01-02 03:04:05.678'"])
    if table == "p":
        return {"d": r.choice(["NULL", d]), "dtm": dtm, "dw": wide(46, 4)}
    return {"v": r.choice(["NULL", vec(3)]), "w": r.choice(["NULL", vec(r.randint(0, 4))]), "dw": wide(35, 30),
            "d": d, "dtm": dtm, "ts": r.choice(["NULL", "'0000-00-00 00:00:00'", "'2030-05-06 07:08:09'"])}


def _mapped_rows(r: random.Random, db: str, table: str, ids: range) -> str:
    rows = []
    for i in ids:
        lit = _mapped_literals(r, table)
        rows.append("(" + ", ".join([str(i), *lit.values()]) + ")")
    return f"INSERT INTO {db}.{table} VALUES " + ", ".join(rows)


def _mapped_counts(c: UpstreamClient, db: str, table: str, ts: int, ids: set[int]) -> dict[str, int]:
    """Per column, the values of the upstream's rows ``ids`` at ``ts`` the lake holds as NULL."""
    from cdc_core.changefeed.schema_loader import load_schema
    from cdc_core.schema import column_type as ct

    (info,) = [t for t in load_schema(c, ts).tables_at(ts) if (t.db_name, t.name) == (db, table)]
    out: dict[str, int] = {}
    for row in c.query(f"SELECT * FROM {db}.{table}", at_ts=ts):
        if row["id"] in ids:
            for col in info.columns:
                if ct.maps_to_null(col, col.convert(row[col.name], ct.STORED_DATES)):
                    out[col.name] = out.get(col.name, 0) + 1
    return out


def _written(c: UpstreamClient, db: str, table: str, before: int, after: int) -> set[int]:
    """The ids whose row a window ``(before, after]`` wrote: new or changed since ``before`` (an UPDATE that changes
    nothing writes nothing, in TiDB as here)."""
    old = {row["id"]: row for row in c.query(f"SELECT * FROM {db}.{table}", at_ts=before)}
    return {row["id"] for row in c.query(f"SELECT * FROM {db}.{table}", at_ts=after) if old.get(row["id"]) != row}


def _recorded(sink: Path, where: str) -> dict[str, dict[str, int]]:
    """``{table: {column: count}}`` of the ``values_mapped`` rows the data-quality results hold for ``where``."""
    from cdc_core.changefeed.dq_results import results_path

    out: dict[str, dict[str, int]] = {}
    for r in DeltaTable(results_path(f"file://{sink}")).to_pyarrow_table().to_pylist():
        if r["expectation"].startswith("values_mapped:") and r["where"].startswith(where):
            assert r["success"] and r["mode"] == "checksum"
            column = r["expectation"].split(":", 1)[1]
            table = out.setdefault(r["table"].split(".", 1)[1], {})
            table[column] = table.get(column, 0) + int(r["observed"])
    return out


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_vectors_wide_decimals_and_zero_dates_replicate_by_their_mapping_and_are_counted(
        cdc_home: Path, upstream_cluster: Any, deletion_vectors: bool) -> None:
    """VECTOR(3), VECTOR, DECIMAL(65,30) and DATE/DATETIME/TIMESTAMP holding zero dates (written under a permissive
    sql_mode) through an initial snapshot, two windows of inserts, updates and deletes with the checksum checks,
    a rebuild and verify: Delta equals the upstream under the documented mapping (vectors as array<float>, wide
    decimals as their text, dates Delta cannot hold as NULL), every check passes, and the data-quality results count
    the mapped values of the snapshot, of each window and of the rebuild, table by table and column by column; the
    same with the silver tables merged through deletion vectors."""
    r = random.Random(52)
    cid, db = ("mapped-dv", f"{MDB}_dv") if deletion_vectors else ("mapped", MDB)
    sink = cdc_home / f"lake-{cid}"
    with UpstreamClient(upstream_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}; {_mapped_ddl(db)}")
        c.execute(f"{PERMISSIVE}; {_mapped_rows(r, db, 'm', range(1, 81))}; {_mapped_rows(r, db, 'p', range(1, 81))}; "
                  "SET sql_mode = DEFAULT")  # the client's session back to the global sql_mode
        start_ts = c.get_ts()
        cfg = cdc_home / f"{cid}.toml"
        cfg.write_text(f'changefeed-id = "{cid}"\nsink-uri = "file://{sink}"\nstart-ts = {start_ts}\n'
                       f'initial-snapshot = true\n[filter]\nrules = ["{db}.*"]\n[data-quality]\nmode = "checksum"\n'
                       f'[sink]\ndeletion-vectors = {str(deletion_vectors).lower()}\n')
        _cli("changefeed", "create", "--config", str(cfg))
        snapshot = {t: _mapped_counts(c, db, t, start_ts, set(range(1, 81))) for t in ("m", "p")}
        assert snapshot["m"]["d"] > 10 and snapshot["p"]["d"] > 10  # the random rows do hold such values

        # Window 1: the snapshot, then inserts, updates to and from mapped values, a key move and deletes.
        c.execute(f"""{PERMISSIVE};
            {_mapped_rows(r, db, 'm', range(81, 121))}; {_mapped_rows(r, db, 'p', range(81, 121))};
            UPDATE {db}.m SET d = '0000-00-00', v = '[1,2,3]' WHERE id % 7 = 0;
            UPDATE {db}.m SET d = '2020-01-01', dtm = NULL, ts = '0000-00-00 00:00:00' WHERE id % 5 = 0;
            UPDATE {db}.p SET d = '2021-02-30', dw = -0.5 WHERE id % 6 = 0;
            UPDATE {db}.m SET id = id + 1000 WHERE id = 11;
            DELETE FROM {db}.m WHERE id % 13 = 0; DELETE FROM {db}.p WHERE id % 9 = 0;
            SET sql_mode = DEFAULT""")
        t1 = c.get_ts()
        written = {t: _written(c, db, t, start_ts, t1) for t in ("m", "p")}
        assert 1011 in written["m"] and 11 not in written["m"] and len(written["p"]) > 40
        runner.run_until(cid, t1)
        assert load_state(cid).checkpoint_ts == t1
        for t in ("m", "p"):
            assert typed_rows_match(c, sink, db, t, t1) > 60
        schema = pa.schema(DeltaTable(str(sink / db / "m")).schema().to_arrow())  # the log's (vectors or not)
        assert {f.name: str(f.type) for f in schema} == {
            "id": "int32", "v": "list<element: float>", "w": "list<element: float>", "dw": "string",
            "d": "date32[day]", "dtm": "timestamp[us]", "ts": "timestamp[us, tz=UTC]"}
        q = json.loads(_cli("changefeed", "query", cid))
        assert q["last_checks"]["mode"] == "checksum"
        assert all(res["passed"] for res in q["last_checks"]["tables"].values()), q["last_checks"]
        assert _recorded(sink, "snapshot") == {t: v for t, v in snapshot.items() if v}
        window1 = {t: _mapped_counts(c, db, t, t1, written[t]) for t in ("m", "p")}
        assert _recorded(sink, "window apply") == window1

        # Window 2: more of each, then a rebuild of both tables from the changelog and a full verify.
        c.execute(f"""{PERMISSIVE};
            UPDATE {db}.m SET dtm = '0000-00-00 00:00:00', w = '[]' WHERE id % 4 = 0;
            UPDATE {db}.p SET dtm = '2021-00-01 00:00:00' WHERE id % 4 = 1;
            DELETE FROM {db}.m WHERE id % 10 = 3;
            {_mapped_rows(r, db, 'm', range(200, 210))};
            SET sql_mode = DEFAULT""")
        t2 = c.get_ts()
        runner.run_until(cid, t2)
        for t in ("m", "p"):
            typed_rows_match(c, sink, db, t, t2)
        q = json.loads(_cli("changefeed", "query", cid))
        assert all(res["passed"] for res in q["last_checks"]["tables"].values()), q["last_checks"]
        window2 = {t: _mapped_counts(c, db, t, t2, _written(c, db, t, t1, t2)) for t in ("m", "p")}
        assert _recorded(sink, "window apply") == {
            t: {k: window1[t].get(k, 0) + window2[t].get(k, 0) for k in {*window1[t], *window2[t]}} for t in ("m", "p")}

        (rb,) = runner.run_until(cid, t2, mode="rebuild", run_tag=f"{cid}-rebuild")
        assert rb["plan"]["mode"] == "rebuild" and rb["check"]["passed"], rb["check"]
        for t in ("m", "p"):
            typed_rows_match(c, sink, db, t, t2)
        # the rebuild replays the snapshot base and both windows: it counts what they counted
        assert _recorded(sink, "rebuild") == {t: {k: snapshot[t].get(k, 0) + window1[t].get(k, 0) + window2[t].get(
            k, 0) for k in {*snapshot[t], *window1[t], *window2[t]}} for t in ("m", "p")}
        _cli("verify", cid)
