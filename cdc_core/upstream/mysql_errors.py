"""MySQL error codes and SQLSTATEs for the SQL front's errors, as TiDB answers them.

The SQL front's messages are MySQL's own texts ("Duplicate entry '1' for key 't.PRIMARY'", "Table 'd.t' doesn't
exist", ...), so the code follows from the message and the error kind. Codes from MySQL's server error reference
(TiDB reuses them: pkg/errno/errcode.go) and TiDB's own: 9007 ErrWriteConflict, 9006 ErrGCTooEarly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cdc_core.upstream.errors import ErrorKind, SqlError


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
ER_DUP_FIELDNAME = MysqlCode(1060, b"42S21")
ER_DUP_KEYNAME = MysqlCode(1061, b"42000")
ER_DUP_ENTRY = MysqlCode(1062, b"23000")
ER_PARSE_ERROR = MysqlCode(1064, b"42000")
ER_CANT_DROP_FIELD_OR_KEY = MysqlCode(1091, b"42000")
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
ER_UNIQUE_KEY_NEED_ALL_FIELDS_IN_PF = MysqlCode(1503, b"HY000")
ER_PARTITION_MGMT_ON_NONPARTITIONED = MysqlCode(1505, b"HY000")
ER_PARTITION_EXCHANGE_PART_TABLE = MysqlCode(1732, b"HY000")
ER_TABLES_DIFFERENT_METADATA = MysqlCode(1736, b"HY000")
ER_ROW_DOES_NOT_MATCH_PARTITION = MysqlCode(1737, b"HY000")
# TiDB's ErrMemoryExceedForQuery (pkg/errno/errcode.go): a query over its memory quota; here a listing refused by
# the upstream-catalog limiter.
TIDB_MEM_QUOTA_EXCEEDED = MysqlCode(8175, b"HY000")
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
        (r"unknown column ", ER_BAD_FIELD_ERROR),
        (r"^Duplicate column name ", ER_DUP_FIELDNAME),
        (r"^Duplicate key name ", ER_DUP_KEYNAME),
        (r"^Can't DROP '", ER_CANT_DROP_FIELD_OR_KEY),
        (r"^Field '.*' doesn't have a default value", ER_NO_DEFAULT_FOR_FIELD),
        (r"^No database selected", ER_NO_DB_ERROR),
        (r"^Unsupported (modify column|operate same)", ER_UNSUPPORTED_DDL),
        (r"^invalid DEFAULT", ER_INVALID_DEFAULT),
        (r"^unsupported (statement|SQL)", ER_NOT_SUPPORTED_YET),
        (r"^Data truncated for column", ER_WARN_DATA_TRUNCATED),
        (r"^Table has no partition for value", ER_NO_PARTITION_FOR_GIVEN_VALUE),
        (r"^A (PRIMARY KEY|UNIQUE INDEX) must include all columns in the table's partitioning function",
         ER_UNIQUE_KEY_NEED_ALL_FIELDS_IN_PF),
        (r"^Partition management on a not partitioned table", ER_PARTITION_MGMT_ON_NONPARTITIONED),
        (r"^Table to exchange with partition is partitioned", ER_PARTITION_EXCHANGE_PART_TABLE),
        (r"^Tables have different definitions", ER_TABLES_DIFFERENT_METADATA),
        (r"^Found a row that does not match the partition", ER_ROW_DOES_NOT_MATCH_PARTITION),
        # A value that does not fit its column (cdc_core.schema.column_type's messages), as strict mode refuses it.
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
    message = strip_context(exc.message)
    for pattern, code in _BY_MESSAGE:
        if pattern.search(message):
            return code
    return ER_UNKNOWN_ERROR
