"""What the embedded upstream's chunk checksum costs on top of reading the rows (``make bench``).

The full reconciliation has the upstream compute, per chunk, ``COUNT(*)`` and ``BIT_XOR(CAST(CRC32(CONCAT_WS(',',
<columns>, CONCAT(ISNULL(c1), ...))) AS UNSIGNED))`` with ``MIN`` / ``MAX`` of the range column
(``spark_jobs/checks/chunk_checksum.py``): about a dozen expression nodes evaluated on every row. The upstream compiles
an expression once per statement into closures (``cdc_core/upstream/sql/expr.py``, ``compile_expr``). This bench times
the checksum statement over a table against the same scan with a one-node filter (``WHERE pad IS NOT NULL``, every row
read and decoded, one predicate each), in the upstream's own SQL engine (no MySQL protocol), in interleaved rounds,
the fastest of each kept. Printed: microseconds per row each way and their ratio, what the checksum's expression
costs as a share of the scan.
"""

from __future__ import annotations

import time

ROWS = 20_000
ROUNDS = 3


def test_chunk_checksum_over_a_plain_scan() -> None:
    from cdc_core.changefeed.reconcile import load_schema
    from cdc_core.client.upstream import UpstreamClient
    from cdc_core.upstream.embedded import EmbeddedCluster
    from cdc_core.upstream.workload import Workload, WorkloadConfig
    from spark_jobs.checks import chunk_checksum
    from spark_jobs.upstream_read import Chunk

    with EmbeddedCluster() as ec, UpstreamClient(ec.pd_addr) as c:
        # The scale bench's tables: sysbench's columns, the workload's rows (a NULL unique key each)
        cfg = WorkloadConfig(db="b", tables=1, id_range=ROWS, initial_rows=ROWS)
        Workload(cfg, lambda sql: [(r.affected_rows, r.commit_ts) for r in c.execute(sql)]).prepare()
        ts = c.get_ts()
        (table,) = [t for t in load_schema(c, ts).tables_at(ts) if t.db_name == "b"]
        assert table.name == "sbtest1"
        statements = {"checksum": chunk_checksum.checksum_sql(table, Chunk(None, None), c.literal),
                      "scan": "SELECT COUNT(*) AS cnt FROM `b`.`sbtest1` WHERE `pad` IS NOT NULL"}
        engine = ec.cluster.sql

        async def run(sql: str) -> int:
            (result,) = await engine.session(ts).execute(sql)
            return int(result.rows[0]["cnt"])

        took: dict[str, list[float]] = {name: [] for name in statements}
        for _ in range(ROUNDS):
            for name, sql in statements.items():
                started = time.perf_counter()
                assert ec.run(run(sql), timeout=600) == ROWS
                took[name].append((time.perf_counter() - started) / ROWS)
        checksum, scan = min(took["checksum"]), min(took["scan"])
        print(f"\nupstream, per row of a {ROWS:,}-row table: chunk checksum {checksum * 1e6:.1f} µs, plain scan "
              f"{scan * 1e6:.1f} µs (ratio {checksum / scan:.2f})")
        assert checksum > scan
