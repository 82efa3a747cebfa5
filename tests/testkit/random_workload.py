"""A seeded random workload for the differential tests: transactions over several tables (clustered by an integer
handle; clustered by a common handle, a composite VARCHAR + INT primary key; non-clustered; RANGE-partitioned) that
insert, update, move primary and unique keys (seed 002's swap included), delete, span tables, with DDL sprinkled in
(add column of any type with a default, rename / drop / widen a column, truncate, rename a table, create a table).
Tables carry columns of random MySQL types besides INT and VARCHAR. It keeps a model of the schema only -- rows are
never predicted: the tests compare Delta with the upstream's own snapshot. Statements that collide on a key fail
upstream and their transaction rolls back, as in MySQL; that is part of the workload, not an error.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import UpstreamError

ID_RANGE = 40  # small, so that keys collide, move onto freed keys and come back
MAX_TABLES = 5
# Column types beyond INT/VARCHAR that tables and ADD COLUMN draw from, each with a random SQL literal.
TYPED: dict[str, Callable[[random.Random], str]] = {
    "TINYINT UNSIGNED": lambda r: str(r.randrange(256)),
    "BIGINT UNSIGNED": lambda r: str(r.choice([(1 << 64) - 1, r.randrange(1 << 64)])),
    "FLOAT": lambda r: f"{r.uniform(-1e4, 1e4):.2f}",
    "DOUBLE": lambda r: repr(r.uniform(-1, 1) * 10 ** r.randint(-20, 20)),
    "DECIMAL(12,3)": lambda r: f"{r.randrange(-10**9, 10**9)}.{r.randrange(1000):03d}",
    "DATE": lambda r: f"'{r.randint(1000, 9999)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}'",
    "DATETIME(3)": lambda r: f"'2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} 0{r.randint(0, 9)}:30:00."
                             f"{r.randrange(1000)}'",
    "TIMESTAMP": lambda r: f"'20{r.randint(10, 37)}-0{r.randint(1, 9)}-1{r.randint(0, 9)} 12:00:0{r.randint(0, 9)}'",
    "TIME(1)": lambda r: f"'{r.choice(['-', ''])}{r.randrange(839)}:{r.randrange(60):02d}:00.{r.randrange(10)}'",
    "YEAR": lambda r: str(r.randint(1901, 2155)),
    "CHAR(3)": lambda r: f"'{r.choice(['a', 'bb', 'ccc', 'é'])}'",
    "VARBINARY(6)": lambda r: f"x'{r.randbytes(r.randrange(7)).hex()}'",
    "ENUM('a','b','c')": lambda r: f"'{r.choice('abc')}'",
    "SET('x','y','z')": lambda r: "'" + ",".join(r.sample("xyz", r.randint(0, 3))) + "'",
    "BIT(5)": lambda r: f"b'{r.getrandbits(5):b}'",
    "JSON": lambda r: "'" + json.dumps(r.choice([[r.randrange(9)], {"k": r.random()}, "s", None])) + "'",
}
# MODIFY COLUMN changes the silver table can follow: type -> wider type (TiDB reorganizes most of them).
WIDER = {"INT": "BIGINT", "TINYINT UNSIGNED": "SMALLINT", "FLOAT": "DOUBLE", "DECIMAL(12,3)": "DECIMAL(14,4)",
         "ENUM('a','b','c')": "ENUM('a','b','c','d')", "CHAR(3)": "CHAR(8)"}


# How rows are keyed: the INT PK, the (grp, id) PK's datums, _tidb_rowid, and the INT PK of a table RANGE-partitioned
# on it (rows move between partitions when the PK moves).
HANDLES = ("int", "common", "rowid", "partitioned")


def range_clause(ranges: list[tuple[str, int | None]]) -> str:
    return "PARTITION BY RANGE (id) (" + ", ".join(
        f"PARTITION {n} VALUES LESS THAN ({'MAXVALUE' if b is None else b})" for n, b in ranges) + ")"


@dataclass
class Table:
    name: str
    handle: str  # one of HANDLES
    payload: dict[str, str] = field(default_factory=dict)  # column -> SQL type (INT, VARCHAR(16), TYPED's)
    # A "partitioned" table's RANGE partitions now (names, upper bounds; None: MAXVALUE), [] when it is HASH
    # partitioned (hashed) or not partitioned (PARTITION BY / REMOVE PARTITIONING / REORGANIZE PARTITION change it).
    ranges: list[tuple[str, int | None]] = field(default_factory=list)
    hashed: bool = False

    def create_sql(self, db: str) -> str:
        cols = ", ".join(f"{c} {t}" for c, t in self.payload.items())
        if self.handle == "common":  # every row takes grp's default: the statements address rows by id alone
            return (f"CREATE TABLE {db}.{self.name} (grp VARCHAR(4) NOT NULL DEFAULT 'ab', id INT NOT NULL, "
                    f"u INT NULL, {cols}, PRIMARY KEY (grp, id) CLUSTERED, UNIQUE KEY uk (u))")
        if self.handle == "partitioned":  # a unique key must include the partitioning column (MySQL error 1503)
            third = ID_RANGE // 3
            self.ranges = [("p0", third), ("p1", 2 * third), ("p2", None)]
            return (f"CREATE TABLE {db}.{self.name} (id INT NOT NULL, u INT NULL, {cols}, PRIMARY KEY (id), "
                    f"UNIQUE KEY uk (u, id)) {range_clause(self.ranges)}")
        pk = "PRIMARY KEY (id)" if self.handle == "int" else "PRIMARY KEY (id) NONCLUSTERED"
        return f"CREATE TABLE {db}.{self.name} (id INT NOT NULL, u INT NULL, {cols}, {pk}, UNIQUE KEY uk (u))"


@dataclass
class Stats:
    txns: int = 0
    rolled_back: int = 0
    ddl: list[str] = field(default_factory=list)


class RandomWorkload:
    def __init__(self, client: UpstreamClient, db: str, seed: int) -> None:
        self.c = client
        self.db = db
        self.rng = random.Random(seed)
        self.tables: list[Table] = []
        self.stats = Stats()
        self._names = 0
        self._cols = 0

    # --- set-up --------------------------------------------------------------------------------
    def create_initial(self) -> None:
        self.c.execute(f"CREATE DATABASE {self.db}")
        for handle in HANDLES:
            self._create_table(handle)

    def _create_table(self, handle: str) -> Table:
        self._names += 1
        payload = {"v": "INT", "s": "VARCHAR(16)"}
        for typ in self.rng.sample(sorted(TYPED), 3):
            self._cols += 1
            payload[f"x{self._cols}"] = typ
        t = Table(f"t{self._names}", handle, payload)
        self.c.execute(t.create_sql(self.db))
        self.tables.append(t)
        return t

    # --- values --------------------------------------------------------------------------------
    def _id(self) -> int:
        return self.rng.randrange(ID_RANGE)

    def _value(self, typ: str) -> str:
        if typ in TYPED:
            return "NULL" if self.rng.random() < 0.1 else TYPED[typ](self.rng)
        if typ.startswith("VARCHAR"):
            return "NULL" if self.rng.random() < 0.1 else f"'s{self.rng.randrange(1000)}'"
        return "NULL" if self.rng.random() < 0.1 else str(self.rng.randrange(-1000, 1000))

    def _u(self) -> str:
        return "NULL" if self.rng.random() < 0.3 else str(self.rng.randrange(ID_RANGE))

    # --- DML -----------------------------------------------------------------------------------
    def _statement(self, t: Table) -> list[str]:
        q = f"{self.db}.{t.name}"
        r = self.rng.random()
        col, typ = self.rng.choice(list(t.payload.items()))
        if r < 0.35:
            cols = ", ".join(["id", "u", *t.payload])
            vals = ", ".join([str(self._id()), self._u(), *(self._value(ty) for ty in t.payload.values())])
            return [f"INSERT INTO {q} ({cols}) VALUES ({vals})"]
        if r < 0.55:
            return [f"UPDATE {q} SET {col} = {self._value(typ)} WHERE id = {self._id()}"]
        if r < 0.67:  # the primary key moves
            return [f"UPDATE {q} SET id = {self._id()}, {col} = {self._value(typ)} WHERE id = {self._id()}"]
        if r < 0.77:  # the unique key moves (or becomes NULL)
            return [f"UPDATE {q} SET u = {self._u()} WHERE id = {self._id()}"]
        if r < 0.85:  # seed 002: swap two primary keys through a third value, in one transaction
            a, b = self._id(), self._id()
            return [f"UPDATE {q} SET id = {ID_RANGE + 7} WHERE id = {a}", f"UPDATE {q} SET id = {a} WHERE id = {b}",
                    f"UPDATE {q} SET id = {b} WHERE id = {ID_RANGE + 7}"]
        return [f"DELETE FROM {q} WHERE id = {self._id()}"]

    def transaction(self) -> None:
        stmts: list[str] = []
        for _ in range(self.rng.randint(1, 4)):
            stmts += self._statement(self.rng.choice(self.tables))  # often more than one table
        self.stats.txns += 1
        try:
            self.c.execute("BEGIN; " + "; ".join(stmts) + "; COMMIT")
        except UpstreamError:
            self.stats.rolled_back += 1  # a key collided: the whole transaction rolled back

    # --- DDL -----------------------------------------------------------------------------------
    def ddl(self) -> str:
        t = self.rng.choice(self.tables)
        q = f"{self.db}.{t.name}"
        kinds = ["add", "rename_col", "truncate", "rename_table", "create"]
        widenable = [c for c, ty in t.payload.items() if ty in WIDER]
        if widenable:
            kinds.append("widen")
        if len(t.payload) > 1:
            kinds.append("drop_col")
        if len(self.tables) >= MAX_TABLES:
            kinds.remove("create")
        # One table in four or five is partitioned: its partition DDL is made likelier than one kind in eight.
        kind = "repartition" if t.handle == "partitioned" and self.rng.random() < 0.4 else self.rng.choice(kinds)
        self._cols += 1
        if kind == "repartition":
            sql = f"ALTER TABLE {q} {self._repartition(t)}"
            self.c.execute(sql)
            self.stats.ddl.append(sql)
            return sql
        if kind == "add":
            name = f"c{self._cols}"
            typ = self.rng.choice(["INT", *(ty for ty in sorted(TYPED) if ty != "JSON")])  # JSON takes no DEFAULT
            default = str(self.rng.randrange(100)) if typ == "INT" else TYPED[typ](self.rng)
            if typ.startswith("VARBINARY"):  # a default that is not UTF-8 cannot be kept in TiDB's schema JSON
                default = "x'" + bytes(self.rng.randrange(32, 127) for _ in range(self.rng.randrange(7))).hex() + "'"
            sql = f"ALTER TABLE {q} ADD COLUMN {name} {typ} DEFAULT {default}"
            t.payload[name] = typ
        elif kind == "rename_col":
            old = self.rng.choice(list(t.payload))
            new = f"r{self._cols}"
            sql = f"ALTER TABLE {q} RENAME COLUMN {old} TO {new}"
            t.payload = {(new if c == old else c): ty for c, ty in t.payload.items()}
        elif kind == "drop_col":
            col = self.rng.choice(list(t.payload))
            sql = f"ALTER TABLE {q} DROP COLUMN {col}"
            del t.payload[col]
        elif kind == "widen":
            col = self.rng.choice(widenable)
            wider = WIDER[t.payload[col]]
            sql = f"ALTER TABLE {q} MODIFY COLUMN {col} {wider}"
            t.payload[col] = wider
        elif kind == "truncate":
            sql = f"TRUNCATE TABLE {q}"
        elif kind == "rename_table":
            self._names += 1
            new = f"t{self._names}"
            sql = f"RENAME TABLE {q} TO {self.db}.{new}"
            t.name = new
        else:
            t = self._create_table(self.rng.choice(HANDLES))
            self.stats.ddl.append(f"CREATE TABLE {t.name}")
            return self.stats.ddl[-1]
        self.c.execute(sql)
        self.stats.ddl.append(sql)
        return sql

    def _repartition(self, t: Table) -> str:
        """A partition DDL that moves the rows to new physical ids (TiDB's actions 64, 71, 72)."""
        self._names += 1
        if len(t.ranges) >= 2 and self.rng.random() < 0.5:  # merge two neighbouring RANGE partitions
            i = self.rng.randrange(len(t.ranges) - 1)
            (a, _), (b, bound) = t.ranges[i], t.ranges[i + 1]
            merged = f"m{self._names}"
            t.ranges[i:i + 2] = [(merged, bound)]
            return (f"REORGANIZE PARTITION {a}, {b} INTO (PARTITION {merged} VALUES LESS THAN "
                    f"({'MAXVALUE' if bound is None else bound}))")
        choices = ["range", "hash", "remove"] if (t.ranges or t.hashed) else ["range", "hash"]
        choice = self.rng.choice(choices)
        t.hashed = choice == "hash"
        if choice == "range":
            cuts = sorted(self.rng.sample(range(1, ID_RANGE), self.rng.randint(1, 3)))
            t.ranges = [(f"r{self._names}_{i}", c) for i, c in enumerate(cuts)] + [(f"r{self._names}_max", None)]
            return range_clause(t.ranges)
        t.ranges = []
        return f"PARTITION BY HASH (id) PARTITIONS {self.rng.randint(2, 4)}" if choice == "hash" else \
            "REMOVE PARTITIONING"

    def steps(self, n: int, ddl_share: float = 0.12) -> None:
        for _ in range(n):
            if self.rng.random() < ddl_share:
                self.ddl()
            else:
                self.transaction()
