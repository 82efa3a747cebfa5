"""A seeded random workload for the differential tests: transactions over several tables (clustered and
non-clustered) that insert, update, move primary and unique keys (seed 002's swap included), delete, span
tables, with DDL sprinkled in (add column with a default, rename / drop / widen a column, truncate, rename a
table, create a table). It keeps a model of the schema only — rows are never predicted: the tests compare
Delta with the upstream's own snapshot. Statements that collide on a key fail upstream and their transaction
rolls back, as in MySQL; that is part of the workload, not an error.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import UpstreamError

ID_RANGE = 40  # small, so that keys collide, move onto freed keys and come back
MAX_TABLES = 4


@dataclass
class Table:
    name: str
    clustered: bool
    payload: dict[str, str] = field(default_factory=dict)  # column -> type (INT, BIGINT, VARCHAR(16))

    def create_sql(self, db: str) -> str:
        cols = ", ".join(f"{c} {t}" for c, t in self.payload.items())
        pk = "PRIMARY KEY (id)" if self.clustered else "PRIMARY KEY (id) NONCLUSTERED"
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
        for clustered in (True, False):
            self._create_table(clustered)

    def _create_table(self, clustered: bool) -> Table:
        self._names += 1
        t = Table(f"t{self._names}", clustered, {"v": "INT", "s": "VARCHAR(16)"})
        self.c.execute(t.create_sql(self.db))
        self.tables.append(t)
        return t

    # --- values --------------------------------------------------------------------------------
    def _id(self) -> int:
        return self.rng.randrange(ID_RANGE)

    def _value(self, typ: str) -> str:
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
        ints = [c for c, ty in t.payload.items() if ty == "INT"]
        if ints:
            kinds.append("widen")
        if len(t.payload) > 1:
            kinds.append("drop_col")
        if len(self.tables) >= MAX_TABLES:
            kinds.remove("create")
        kind = self.rng.choice(kinds)
        self._cols += 1
        if kind == "add":
            name, default = f"c{self._cols}", self.rng.randrange(100)
            sql = f"ALTER TABLE {q} ADD COLUMN {name} INT DEFAULT {default}"
            t.payload[name] = "INT"
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
            col = self.rng.choice(ints)
            sql = f"ALTER TABLE {q} MODIFY COLUMN {col} BIGINT"
            t.payload[col] = "BIGINT"
        elif kind == "truncate":
            sql = f"TRUNCATE TABLE {q}"
        elif kind == "rename_table":
            self._names += 1
            new = f"t{self._names}"
            sql = f"RENAME TABLE {q} TO {self.db}.{new}"
            t.name = new
        else:
            t = self._create_table(self.rng.random() < 0.5)
            self.stats.ddl.append(f"CREATE TABLE {t.name}")
            return self.stats.ddl[-1]
        self.c.execute(sql)
        self.stats.ddl.append(sql)
        return sql

    def steps(self, n: int, ddl_share: float = 0.12) -> None:
        for _ in range(n):
            if self.rng.random() < ddl_share:
                self.ddl()
            else:
                self.transaction()
