"""The embedded upstream's batched point reads (``make bench``): its two fast paths against the same upstream without
them, side by side.

The window checks read the upstream at every changed key (``SELECT * FROM t WHERE id IN (1,000 keys)`` at the
window's ts). Two fast paths serve such a statement:

- ``ParsedStatement.plain``: no variable, hint or call in it, so the MySQL front skips mysql-mimic's variable
  processor (a walk of the whole tree);
- ``Access.exact``: the WHERE is the handle's ``IN`` list of integers, so the rows read at those handles are the
  result, without the WHERE evaluated on each (TiDB's BatchPointGet);
- the ``IN`` list's integers held out of the tokenizer and put back as the parser's nodes (``split_script``);
- a result shorter than a stream batch sent whole, by mysql-mimic's list path (``StatementResult.more`` None).

One embedded upstream and its client run in this process; the CPU time of the upstream's threads (all but this
one) is read from ``/proc`` per statement, with the fast paths and without them (monkeypatched off), in interleaved
rounds, the fastest round of each kept. Printed: CPU per 1,000 keys each way and their ratio.
"""

from __future__ import annotations

import dataclasses
import os
import random
import threading
from pathlib import Path

import pytest

ROWS = 20_000
KEYS = 1_000
STATEMENTS = 20  # per round
ROUNDS = 3


def _others_cpu() -> float:
    """CPU seconds of every thread of this process but the calling one (the upstream's loop and workers)."""
    me, tick, total = threading.get_native_id(), os.sysconf("SC_CLK_TCK"), 0
    for task in Path("/proc/self/task").iterdir():
        if int(task.name) == me:
            continue
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a thread that ended meanwhile
        total += int(fields[11]) + int(fields[12])
    return total / tick


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads threads' CPU time from /proc")
def test_point_reads_with_and_without_the_fast_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_core.client.upstream import UpstreamClient
    from cdc_core.upstream.embedded import EmbeddedCluster
    from cdc_core.upstream.sql import access_path, mysql_front, sql_front

    plan, plain = access_path.plan, sql_front.plain_tokens
    split, batch = mysql_front.split_script, sql_front.STREAM_BATCH_ROWS

    def without(on: bool) -> None:
        monkeypatch.setattr(sql_front, "plain_tokens", plain if on else lambda tokens: False)
        monkeypatch.setattr(access_path, "plan", plan if on else
                            lambda info, where: dataclasses.replace(plan(info, where), exact=False))
        monkeypatch.setattr(mysql_front, "split_script", split if on else lambda sql: sql_front._split_script(sql, {}))
        # a batch of exactly the result's rows keeps ``more``: the result streams, row by row
        monkeypatch.setattr(sql_front, "STREAM_BATCH_ROWS", batch if on else KEYS)

    rng = random.Random(3)
    with EmbeddedCluster() as ec, UpstreamClient(ec.pd_addr) as c:
        c.execute("CREATE DATABASE b; CREATE TABLE b.t (id BIGINT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, "
                  "pad CHAR(60) NOT NULL)")
        for start in range(0, ROWS, 2_000):
            c.execute("INSERT INTO b.t VALUES " + ", ".join(
                f"({i - ROWS // 2}, {i % 1000}, '{i:0120d}', '{i:060d}')" for i in range(start, start + 2_000)))
        ts = c.get_ts()
        ids = range(-ROWS // 2, ROWS // 2)
        statements = [f"SELECT * FROM `b`.`t` WHERE `id` IN ({', '.join(map(str, rng.sample(ids, KEYS)))})"
                      for _ in range(STATEMENTS)]
        took: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(ROUNDS):
            for on in (True, False):
                without(on)
                assert sum(1 for _ in c.iter_rows(statements[0], at_ts=ts)) == KEYS
                started = _others_cpu()
                for sql in statements:
                    for _row in c.iter_rows(sql, at_ts=ts):
                        pass
                took[on].append((_others_cpu() - started) / STATEMENTS)
        fast, slow = min(took[True]), min(took[False])
        print(f"\npoint read of {KEYS:,} keys: the upstream's CPU {fast * 1000:.1f} ms with the fast paths, "
              f"{slow * 1000:.1f} ms without (ratio {fast / slow:.2f})")
        assert fast < slow
