"""TiKV's stores, as the embedded cluster runs them: the MVCC store with 2PC, 1PC and async commit (``mvcc``) and the
concurrency manager its commit ts come from (``concurrency_manager``), the change feed (``cdc_service``) and KV reads
(``kv_service``) of one store (``store_node``), automatic splits (``split_checker``), GC passes (``gc_worker``), the
min resolved ts reports to PD (``resolved_ts_reporter``) and their background tasks (``loop_task``). Uses PD's parts
(TSO, regions, safe points), never the SQL front."""
