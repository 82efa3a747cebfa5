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
