"""MySQL error codes and SQLSTATEs for the SQL front's errors, as TiDB answers them.

The SQL front's messages are MySQL's own texts ("Duplicate entry '1' for key 't.PRIMARY'", "Table 'd.t' doesn't
exist", ...), so the code follows from the message and the error kind. Codes from MySQL's server error reference
(TiDB reuses them: pkg/errno/errcode.go) and TiDB's own: 9007 ErrWriteConflict, 9006 ErrGCTooEarly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cdc_core.upstream.sql.errors import ErrorKind, SqlError


@dataclass(frozen=True)
class MysqlCode:
    code: int
    sqlstate: bytes


ER_DB_CREATE_EXISTS = MysqlCode(1007, b"HY000")
ER_DB_DROP_EXISTS = MysqlCode(1008, b"HY000")
ER_BAD_NULL_ERROR = MysqlCode(1048, b"23000")
ER_BAD_DB_ERROR = MysqlCode(1049, b"42000")
ER_TABLE_EXISTS_ERROR = MysqlCode(1050, b"42S01")
ER_BAD_TABLE_ERROR = MysqlCode(1051, b"42S02")
ER_BAD_FIELD_ERROR = MysqlCode(1054, b"42S22")
ER_NON_UNIQ_ERROR = MysqlCode(1052, b"23000")  # "Column 'x' in field list is ambiguous"
ER_WRONG_FIELD_WITH_GROUP = MysqlCode(1055, b"42000")  # ErrFieldNotInGroupBy (ONLY_FULL_GROUP_BY)
ER_WRONG_GROUP_FIELD = MysqlCode(1056, b"42000")  # "Can't group on 'x'"
ER_NONUNIQ_TABLE = MysqlCode(1066, b"42000")  # "Not unique table/alias: 'x'"
ER_NO_TABLES_USED = MysqlCode(1096, b"HY000")
ER_MIX_OF_GROUP_FUNC_AND_FIELDS = MysqlCode(1140, b"42000")
ER_SP_DOES_NOT_EXIST = MysqlCode(1305, b"42000")  # "FUNCTION db.fn does not exist"
ER_FIELD_IN_ORDER_NOT_SELECT = MysqlCode(3065, b"HY000")  # DISTINCT with ORDER BY on a column not selected
ER_WRONG_PARAMCOUNT_TO_NATIVE_FCT = MysqlCode(1582, b"42000")
ER_DUP_FIELDNAME = MysqlCode(1060, b"42S21")
ER_DUP_KEYNAME = MysqlCode(1061, b"42000")
ER_DUP_ENTRY = MysqlCode(1062, b"23000")
ER_PARSE_ERROR = MysqlCode(1064, b"42000")
ER_CANT_DROP_FIELD_OR_KEY = MysqlCode(1091, b"42000")
ER_MULTIPLE_PRI_KEY = MysqlCode(1068, b"42000")
ER_INVALID_USE_OF_NULL = MysqlCode(1138, b"22004")
ER_UNKNOWN_ERROR = MysqlCode(1105, b"HY000")
ER_NO_SUCH_TABLE = MysqlCode(1146, b"42S02")
ER_NO_DEFAULT_FOR_FIELD = MysqlCode(1364, b"HY000")
ER_NO_DB_ERROR = MysqlCode(1046, b"3D000")
ER_INVALID_DEFAULT = MysqlCode(1067, b"42000")
ER_WARN_DATA_OUT_OF_RANGE = MysqlCode(1264, b"22003")
ER_WARN_DATA_TRUNCATED = MysqlCode(1265, b"01000")
ER_TRUNCATED_WRONG_VALUE = MysqlCode(1292, b"22007")
ER_TRUNCATED_WRONG_VALUE_FOR_FIELD = MysqlCode(1366, b"HY000")
ER_DATA_TOO_LONG = MysqlCode(1406, b"22001")
ER_INVALID_JSON_TEXT = MysqlCode(3140, b"22032")
ER_NOT_SUPPORTED_YET = MysqlCode(1235, b"42000")  # "This version of TiDB doesn't yet support ..."
ER_UNSUPPORTED_DDL = MysqlCode(8200, b"HY000")  # TiDB's ErrUnsupportedDDLOperation / ErrUnsupportedModifyColumn
ER_NO_PARTITION_FOR_GIVEN_VALUE = MysqlCode(1526, b"HY000")
# Partitioning's definition errors (MySQL's codes, TiDB's pkg/errno/errcode.go and pkg/parser/mysql/errcode.go).
ER_PARTITION_REQUIRES_VALUES = MysqlCode(1479, b"HY000")
ER_PARTITION_WRONG_VALUES = MysqlCode(1480, b"HY000")
ER_PARTITION_MAXVALUE = MysqlCode(1481, b"HY000")
ER_PARTITION_WRONG_NO_PART = MysqlCode(1484, b"HY000")
ER_FIELD_NOT_FOUND_PART = MysqlCode(1488, b"HY000")
ER_PARTITIONS_MUST_BE_DEFINED = MysqlCode(1492, b"HY000")
ER_RANGE_NOT_INCREASING = MysqlCode(1493, b"HY000")
ER_MULTIPLE_DEF_CONST_IN_LIST_PART = MysqlCode(1495, b"HY000")
ER_NO_PARTS = MysqlCode(1504, b"HY000")
ER_DROP_PARTITION_NON_EXISTENT = MysqlCode(1507, b"HY000")
ER_DROP_LAST_PARTITION = MysqlCode(1508, b"HY000")
ER_COALESCE_ONLY_ON_HASH_PARTITION = MysqlCode(1509, b"HY000")
ER_ONLY_ON_RANGE_LIST_PARTITION = MysqlCode(1512, b"HY000")
ER_COALESCE_PARTITION_NO_PARTITION = MysqlCode(1515, b"HY000")
ER_SAME_NAME_PARTITION = MysqlCode(1517, b"HY000")
ER_NULL_IN_VALUES_LESS_THAN = MysqlCode(1566, b"42000")
ER_WRONG_PARTITION_NAME = MysqlCode(1567, b"HY000")
ER_SAME_NAME_PARTITION_FIELD = MysqlCode(1652, b"HY000")
ER_PARTITION_COLUMN_LIST = MysqlCode(1653, b"HY000")
ER_WRONG_TYPE_COLUMN_VALUE = MysqlCode(1654, b"HY000")
ER_MAXVALUE_IN_VALUES_IN = MysqlCode(1656, b"HY000")
ER_TOO_MANY_VALUES = MysqlCode(1657, b"HY000")
ER_ROW_SINGLE_PARTITION_FIELD = MysqlCode(1658, b"HY000")
ER_FIELD_TYPE_NOT_ALLOWED_AS_PARTITION_FIELD = MysqlCode(1659, b"HY000")
ER_VALUES_IS_NOT_INT_TYPE = MysqlCode(1697, b"HY000")
ER_UNKNOWN_PARTITION = MysqlCode(1735, b"HY000")
ER_UNIQUE_KEY_NEED_ALL_FIELDS_IN_PF = MysqlCode(1503, b"HY000")
ER_PARTITION_MGMT_ON_NONPARTITIONED = MysqlCode(1505, b"HY000")
ER_PARTITION_EXCHANGE_PART_TABLE = MysqlCode(1732, b"HY000")
ER_TABLES_DIFFERENT_METADATA = MysqlCode(1736, b"HY000")
ER_ROW_DOES_NOT_MATCH_PARTITION = MysqlCode(1737, b"HY000")
# The binary protocol's (COM_STMT_*: pkg/server/conn_stmt.go, pkg/param/binary_params.go, pkg/executor/prepared.go)
ER_EMPTY_QUERY = MysqlCode(1065, b"42000")
ER_WRONG_ARGUMENTS = MysqlCode(1210, b"HY000")  # "Incorrect arguments to %s"
ER_UNKNOWN_STMT_HANDLER = MysqlCode(1243, b"HY000")  # "Unknown prepared statement handler (%s) given to %s"
ER_UNSUPPORTED_PS = MysqlCode(1295, b"HY000")
ER_SP_CURSOR_NOT_OPEN = MysqlCode(1326, b"24000")
ER_MALFORMED_PACKET = MysqlCode(1835, b"HY000")  # "Malformed communication packet."
TIDB_UNKNOWN_FIELD_TYPE = MysqlCode(8051, b"HY000")  # ErrUnknownFieldType: "stmt unknown field type %d"
TIDB_PREPARE_MULTI = MysqlCode(8115, b"HY000")  # ErrPrepareMulti: "Can not prepare multiple statements"
# TiDB's ErrMemoryExceedForQuery (pkg/errno/errcode.go): a query over its memory quota; here a listing refused by
# the upstream-catalog limiter.
TIDB_MEM_QUOTA_EXCEEDED = MysqlCode(8175, b"HY000")
# A pessimistic lock wait (pkg/errno/errcode.go ErrLockWaitTimeout, ErrLockDeadlock; MySQL's codes and states)
ER_LOCK_WAIT_TIMEOUT = MysqlCode(1205, b"HY000")
ER_LOCK_DEADLOCK = MysqlCode(1213, b"40001")
ER_LOCK_NOWAIT = MysqlCode(3572, b"HY000")  # ErrLockAcquireFailAndNoWaitSet: FOR UPDATE NOWAIT met a lock
TIDB_GC_TOO_EARLY = MysqlCode(9006, b"HY000")
TIDB_WRITE_CONFLICT = MysqlCode(9007, b"HY000")

# First match wins; searched in the message without the SQL front's "statement N `...`: " prefixes.
_BY_MESSAGE: tuple[tuple[re.Pattern[str], MysqlCode], ...] = tuple(
    (re.compile(p), c) for p, c in (
        (r"syntax error|cannot tokenize", ER_PARSE_ERROR),
        (r"^Unknown database '", ER_BAD_DB_ERROR),
        (r"^Can't create database '.*'; database exists", ER_DB_CREATE_EXISTS),
        (r"^Can't drop database '.*'; database doesn't exist", ER_DB_DROP_EXISTS),
        (r"^Table '.*' already exists", ER_TABLE_EXISTS_ERROR),
        (r"^Unknown table '", ER_BAD_TABLE_ERROR),
        (r"^Table '.*' doesn't exist", ER_NO_SUCH_TABLE),
        (r"^Duplicate entry ", ER_DUP_ENTRY),
        (r"^Column '.*' cannot be null", ER_BAD_NULL_ERROR),
        (r"^Unknown column ", ER_BAD_FIELD_ERROR),
        (r"^Column '.*' in .* is ambiguous$", ER_NON_UNIQ_ERROR),
        (r"^Expression #\d+ of .* is not in GROUP BY clause", ER_WRONG_FIELD_WITH_GROUP),
        (r"^In aggregated query without GROUP BY, ", ER_MIX_OF_GROUP_FUNC_AND_FIELDS),
        (r"^Expression #\d+ of ORDER BY clause is not in SELECT list", ER_FIELD_IN_ORDER_NOT_SELECT),
        (r"^Can't group on '", ER_WRONG_GROUP_FIELD),
        (r"^Not unique table/alias: '", ER_NONUNIQ_TABLE),
        (r"^No tables used$", ER_NO_TABLES_USED),
        (r"^FUNCTION .* does not exist$", ER_SP_DOES_NOT_EXIST),
        (r"^Incorrect parameter count in the call to native function ", ER_WRONG_PARAMCOUNT_TO_NATIVE_FCT),
        (r"^Your query has been cancelled due to exceeding the allowed memory limit", TIDB_MEM_QUOTA_EXCEEDED),
        (r"unknown column ", ER_BAD_FIELD_ERROR),
        (r"^Duplicate column name ", ER_DUP_FIELDNAME),
        (r"^Duplicate key name ", ER_DUP_KEYNAME),
        (r"^Can't DROP '", ER_CANT_DROP_FIELD_OR_KEY),
        (r"^Multiple primary key defined", ER_MULTIPLE_PRI_KEY),
        (r"^Invalid use of NULL value", ER_INVALID_USE_OF_NULL),
        (r"^(Unsupported drop primary key|Adding clustered primary key)", ER_UNSUPPORTED_DDL),
        (r"^Field '.*' doesn't have a default value", ER_NO_DEFAULT_FOR_FIELD),
        (r"^No database selected", ER_NO_DB_ERROR),
        (r"^Unsupported (modify column|operate same|reorganize partition|partition type of table|ADD PARTITION of "
         r"HASH/KEY|ADD List partition|REORGANIZE PARTITION of)", ER_UNSUPPORTED_DDL),
        (r"^invalid DEFAULT", ER_INVALID_DEFAULT),
        (r"^unsupported (statement|SQL|in SELECT|in GROUP_CONCAT|expression|IN form)", ER_NOT_SUPPORTED_YET),
        (r"^Statement aborted because lock\(s\) could not be acquired immediately and NOWAIT is set", ER_LOCK_NOWAIT),
        (r"^Data truncated for column", ER_WARN_DATA_TRUNCATED),
        (r"^Table has no partition for value", ER_NO_PARTITION_FOR_GIVEN_VALUE),
        (r"^A (PRIMARY KEY|UNIQUE INDEX|CLUSTERED INDEX) must include all columns in the table's partitioning "
         r"function", ER_UNIQUE_KEY_NEED_ALL_FIELDS_IN_PF),
        (r"^Syntax : .* PARTITIONING requires definition of VALUES", ER_PARTITION_REQUIRES_VALUES),
        (r"^Only .* PARTITIONING can use VALUES .* in partition definition", ER_PARTITION_WRONG_VALUES),
        (r"^MAXVALUE can only be used in last partition definition", ER_PARTITION_MAXVALUE),
        (r"^Wrong number of partitions defined", ER_PARTITION_WRONG_NO_PART),
        (r"^Field in list of fields for partition function not found in table", ER_FIELD_NOT_FOUND_PART),
        (r"^For .* partitions each partition must be defined", ER_PARTITIONS_MUST_BE_DEFINED),
        (r"^VALUES LESS THAN value must be strictly increasing for each partition", ER_RANGE_NOT_INCREASING),
        (r"^Multiple definition of same constant in list partitioning", ER_MULTIPLE_DEF_CONST_IN_LIST_PART),
        (r"^Number of .* = 0 is not an allowed value", ER_NO_PARTS),
        (r"^Error in list of partitions to ", ER_DROP_PARTITION_NON_EXISTENT),
        (r"^Cannot remove all partitions, use DROP TABLE instead", ER_DROP_LAST_PARTITION),
        (r"PARTITION can only be used on HASH/KEY partitions", ER_COALESCE_ONLY_ON_HASH_PARTITION),
        (r"PARTITION can only be used on RANGE/LIST partitions", ER_ONLY_ON_RANGE_LIST_PARTITION),
        (r"^At least one partition must be coalesced", ER_COALESCE_PARTITION_NO_PARTITION),
        (r"^Duplicate partition name ", ER_SAME_NAME_PARTITION),
        (r"^Not allowed to use NULL value in VALUES LESS THAN", ER_NULL_IN_VALUES_LESS_THAN),
        (r"^Incorrect partition name", ER_WRONG_PARTITION_NAME),
        (r"^Duplicate partition field name ", ER_SAME_NAME_PARTITION_FIELD),
        (r"^Inconsistency in usage of column lists for partitioning", ER_PARTITION_COLUMN_LIST),
        (r"^Partition column values of incorrect type", ER_WRONG_TYPE_COLUMN_VALUE),
        (r"^Cannot use MAXVALUE as value in VALUES IN", ER_MAXVALUE_IN_VALUES_IN),
        (r"^Cannot have more than one value for this type of ", ER_TOO_MANY_VALUES),
        (r"^Row expressions in VALUES IN only allowed for multi-field column partitioning",
         ER_ROW_SINGLE_PARTITION_FIELD),
        (r"^Field '.*' is of a not allowed type for this type of partitioning",
         ER_FIELD_TYPE_NOT_ALLOWED_AS_PARTITION_FIELD),
        (r"^VALUES value for partition '.*' must have type INT", ER_VALUES_IS_NOT_INT_TYPE),
        (r"^Unknown partition '", ER_UNKNOWN_PARTITION),
        (r"^Partition management on a not partitioned table", ER_PARTITION_MGMT_ON_NONPARTITIONED),
        (r"^Table to exchange with partition is partitioned", ER_PARTITION_EXCHANGE_PART_TABLE),
        (r"^Tables have different definitions", ER_TABLES_DIFFERENT_METADATA),
        (r"^Found a row that does not match the partition", ER_ROW_DOES_NOT_MATCH_PARTITION),
        # A value that does not fit its column (cdc_core.schema.column_type's messages), as strict mode refuses it.
        # TiDB's vector errors are plain errors (pkg/types/vector.go errors.Errorf): 1105 on the wire.
        (r"^column '.*' \(VECTOR\b.*\): ", ER_UNKNOWN_ERROR),
        (r"^column '.*' \(.*\): .*(out of range|outside .*range|does not fit)", ER_WARN_DATA_OUT_OF_RANGE),
        (r"^column '.*' \(.*\): .*too long", ER_DATA_TOO_LONG),
        (r"^column '.*' \((ENUM|SET)\(.*\): ", ER_WARN_DATA_TRUNCATED),
        (r"^column '.*' \((DATE|DATETIME|TIMESTAMP|TIME)\b.*\): ", ER_TRUNCATED_WRONG_VALUE),
        (r"^column '.*' \(JSON\): ", ER_INVALID_JSON_TEXT),
        (r"^column '.*' \(.*\): ", ER_TRUNCATED_WRONG_VALUE_FOR_FIELD),
    )
)
_PREFIX = re.compile(r"^(statement \d+ `.*?`: )+")


def strip_context(message: str) -> str:
    """The message without the script context the SQL front adds (one statement goes per MySQL query)."""
    return _PREFIX.sub("", message)


def code_of(exc: SqlError) -> MysqlCode:
    if exc.kind is ErrorKind.CONFLICT:
        return TIDB_WRITE_CONFLICT
    if exc.kind is ErrorKind.GC:
        return TIDB_GC_TOO_EARLY
    if exc.kind is ErrorKind.LOCK_WAIT_TIMEOUT:
        return ER_LOCK_WAIT_TIMEOUT
    if exc.kind is ErrorKind.DEADLOCK:
        return ER_LOCK_DEADLOCK
    message = strip_context(exc.message)
    for pattern, code in _BY_MESSAGE:
        if pattern.search(message):
            return code
    return ER_UNKNOWN_ERROR
