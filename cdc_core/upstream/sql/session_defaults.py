"""TiDB's system variables as a new session sees them (``pkg/sessionctx/variable/sysvar.go`` and
``tidb_vars.go`` of v8.5), over mysql-mimic's MySQL defaults: the variable table of the MySQL front.

What clients and tools read when they connect or before they run (sysbench, the ``mysql`` / ``mariadb`` clients,
JDBC and Go drivers, TiDB's own tools): the version, the isolation level (REPEATABLE-READ, under both its names),
TiDB's default ``sql_mode``, ``autocommit``, ``lower_case_table_names`` 2, the time zone ``SYSTEM``, the memory
quota of a query, the timeouts. Each entry is ``name: (type, default, settable)`` (mysql-mimic's
``VariableSchema``). The transaction mode variables (``tidb_txn_mode``, ``innodb_lock_wait_timeout``) are the
pessimistic-transaction work's (``txn_mode``), not here.
"""

from __future__ import annotations

from typing import Final

from mysql_mimic.variables import SYSTEM_VARIABLES, VariableSchema

from cdc_core.upstream.sql import sql_mode as sqlmode
from cdc_core.upstream.sql.mem_quota import DEFAULT_MEM_QUOTA_QUERY
from cdc_core.upstream.sql.tidb_functions import SERVER_VERSION

REPEATABLE_READ: Final = "REPEATABLE-READ"  # TiDB's default isolation (its snapshot isolation)

TIDB_SESSION_DEFAULTS: Final[dict[str, VariableSchema]] = {
    "version": (str, SERVER_VERSION, False),
    "version_comment": (str, "TiDB Server (Apache License 2.0) Community Edition, MySQL 8.0 compatible "
                             "(cdcflow's embedded upstream)", False),
    "license": (str, "Apache License 2.0", False),
    "transaction_isolation": (str, REPEATABLE_READ, True),
    "tx_isolation": (str, REPEATABLE_READ, True),  # the pre-8.0 name, which TiDB keeps as an alias
    "transaction_read_only": (bool, False, True),
    "tx_read_only": (bool, False, True),
    "autocommit": (bool, True, True),
    "sql_mode": (str, sqlmode.DEFAULT_SQL_MODE, True),  # a session's own value: FrontSession keeps it in step
    "tidb_mem_quota_query": (int, DEFAULT_MEM_QUOTA_QUERY, True),
    "tidb_mem_oom_action": (str, "CANCEL", True),
    "lower_case_table_names": (int, 2, False),
    "time_zone": (str, "SYSTEM", True),
    "collation_server": (str, "utf8mb4_bin", True),
    "collation_database": (str, "utf8mb4_bin", True),
    "default_storage_engine": (str, "InnoDB", True),
    "default_tmp_storage_engine": (str, "InnoDB", True),
    "auto_increment_offset": (int, 1, True),
    "net_read_timeout": (int, 30, True),
    "net_write_timeout": (int, 60, True),
    "query_cache_type": (str, "OFF", True),
    "query_cache_size": (int, 1048576, True),
    "div_precision_increment": (int, 4, True),
    "group_concat_max_len": (int, 1024, True),
    "explicit_defaults_for_timestamp": (bool, True, False),
    "max_connections": (int, 0, True),
    "tidb_enable_clustered_index": (str, "ON", True),
    # TiDB's session variables cdcflow and TiCDC's users rely on (mysql_front reads and keeps them)
    "tidb_snapshot": (str, "", True),
    "tidb_current_ts": (int, 0, False),
    "tidb_last_txn_info": (str, "", False),
    # How transactions commit (TiDB's defaults since v5.0: both on; sql_front / txn.CommitOptions)
    "tidb_enable_async_commit": (bool, True, True),
    "tidb_enable_1pc": (bool, True, True),
    "tidb_guarantee_linearizability": (bool, True, True),
}


def session_variables() -> dict[str, VariableSchema]:
    """The MySQL front's variable table: mysql-mimic's MySQL variables with TiDB's values and additions."""
    return {**SYSTEM_VARIABLES, **TIDB_SESSION_DEFAULTS}
