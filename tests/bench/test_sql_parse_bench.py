"""The embedded upstream's SQL parsing: sqlglot compiled with mypyc (``sqlglotc``) against the same sqlglot in pure
Python, side by side (``make bench``).

The upstream parses every statement it serves (``cdc_core.upstream.sql.sql_front``), and the statements it serves most
are the window checks' batched point reads (``SELECT ... WHERE id IN (1,000 keys)``) and a workload's multi-row
INSERTs and UPDATEs. Each is parsed ``REPEAT`` times in two processes, one importing the installed (compiled)
sqlglot and one importing its ``.py`` sources only; the CPU time a statement takes in each, and their ratio, are
printed. Goal: the compiled parse takes at most half the pure one's CPU.

A second test weighs ``split_script``, which parses each statement from the script's tokens, against the way it
parsed before, side by side in this process: the same function with each statement's text given to
``sqlglot.parse_one`` (tokenized a second time).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap

import pytest

REPEAT = 30

_KEYS = random.Random(1).sample(range(-100_000, 100_000), 1_000)
STATEMENTS = {
    "point read, 1,000 keys": f"SELECT * FROM `big`.`sbtest1` WHERE `id` IN ({', '.join(map(str, _KEYS))})",
    "insert, 50 rows": "INSERT INTO sbtest1 (id, k, c, pad, uk) VALUES "
    + ", ".join(f"({i}, {i * 7}, 'c-{i:08d}-{i * 31:012d}', 'pad-{i:016d}', {i})" for i in range(50)),
    "update, 20 keys": f"UPDATE sbtest1 SET k = k + 1 WHERE id IN ({', '.join(map(str, _KEYS[:20]))})",
    "count": "SELECT COUNT(*) AS n FROM `big`.`sbtest1`",
}

# Run in a child: parse each statement REPEAT times; print {name: CPU seconds a statement, "compiled": bool}.
_CHILD = textwrap.dedent('''
    import importlib.abc, importlib.util, json, os, sys, time
    if sys.argv[1] == "pure":
        class PureSqlglot(importlib.abc.MetaPathFinder):
            """sqlglot's modules from their .py sources, never the compiled extensions beside them."""
            def find_spec(self, name, path, target=None):
                if name != "sqlglot" and not name.startswith("sqlglot."):
                    return None
                for entry in path or sys.path:
                    base = os.path.join(entry, name.rpartition(".")[2])
                    if os.path.isfile(os.path.join(base, "__init__.py")):
                        return importlib.util.spec_from_file_location(
                            name, os.path.join(base, "__init__.py"), submodule_search_locations=[base])
                    if os.path.isfile(base + ".py"):
                        return importlib.util.spec_from_file_location(name, base + ".py")
                return None
        sys.meta_path.insert(0, PureSqlglot())
    import sqlglot, sqlglot.parser
    statements, repeat = json.loads(sys.stdin.read()), int(sys.argv[2])
    out = {"compiled": not sqlglot.parser.__file__.endswith(".py")}
    for name, sql in statements.items():
        sqlglot.parse(sql, dialect="mysql")
        started = time.process_time()
        for _ in range(repeat):
            sqlglot.parse(sql, dialect="mysql")
        out[name] = (time.process_time() - started) / repeat
    print(json.dumps(out))
''')


def _run(kind: str) -> dict[str, float]:
    res = subprocess.run([sys.executable, "-c", _CHILD, kind, str(REPEAT)], input=json.dumps(STATEMENTS),
                         capture_output=True, text=True, check=True, timeout=600)
    return json.loads(res.stdout)  # type: ignore[no-any-return]


def test_compiled_sqlglot_parses_the_upstreams_statements_in_half_the_cpu() -> None:
    compiled, pure = _run("compiled"), _run("pure")
    if not compiled.pop("compiled"):
        pytest.skip("sqlglotc is not installed here (the lock installs it on x86_64 and aarch64 only)")
    assert not pure.pop("compiled"), "the pure run imported a compiled module"
    ratios = {}
    for name in STATEMENTS:
        ratios[name] = compiled[name] / pure[name]
        print(f"\n{name}: compiled {compiled[name] * 1000:.1f} ms of CPU, pure Python {pure[name] * 1000:.1f} ms "
              f"(ratio {ratios[name]:.2f})")
    assert max(ratios.values()) <= 0.5, ratios


def test_a_script_is_tokenized_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    import sqlglot

    from cdc_core.upstream.sql import sql_front

    tokens_path = sql_front._parse_tokens

    def text_path(tokens: list[object], sql: str, text: str) -> object:  # the baseline: the text tokenized again
        return sqlglot.parse_one(text, read="mysql")

    for name, sql in STATEMENTS.items():
        took: dict[str, list[float]] = {"once": [], "twice": []}
        for _ in range(3):  # interleaved rounds, the fastest of each kept
            for way, path in (("once", tokens_path), ("twice", text_path)):
                monkeypatch.setattr(sql_front, "_parse_tokens", path)
                sql_front.split_script(sql)
                started = time.process_time()
                for _ in range(REPEAT):
                    sql_front.split_script(sql)
                took[way].append((time.process_time() - started) / REPEAT)
        once, twice = min(took["once"]), min(took["twice"])
        print(f"\n{name}: split_script {once * 1000:.1f} ms of CPU, tokenizing each statement again "
              f"{twice * 1000:.1f} ms (ratio {once / twice:.2f})")
        monkeypatch.setattr(sql_front, "_parse_tokens", tokens_path)
        assert sql_front.split_script(sql)[0].node == sqlglot.parse_one(sql, read="mysql")
