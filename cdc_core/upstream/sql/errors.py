"""Errors of the SQL front, each with the kind that decides its gRPC status code."""

from __future__ import annotations

import enum

from cdc_core.errors import EmbeddedUpstreamError


class ErrorKind(enum.Enum):
    INVALID = "invalid"  # bad or unsupported SQL, bad values -> INVALID_ARGUMENT
    NOT_FOUND = "not_found"  # unknown database / table -> NOT_FOUND
    EXISTS = "exists"  # database / table exists -> ALREADY_EXISTS
    CONSTRAINT = "constraint"  # duplicate key, NOT NULL -> FAILED_PRECONDITION
    CONFLICT = "conflict"  # write conflict / concurrent DDL, transaction rolled back -> ABORTED
    GC = "gc"  # a read below the GC safe point -> FAILED_PRECONDITION
    LOCK_WAIT_TIMEOUT = "lock_wait_timeout"  # a pessimistic lock wait timed out, the statement undone -> ABORTED
    DEADLOCK = "deadlock"  # a lock wait would close a cycle, the transaction rolled back -> ABORTED


class SqlError(EmbeddedUpstreamError):
    def __init__(self, message: str, kind: ErrorKind = ErrorKind.INVALID) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def with_context(self, prefix: str) -> SqlError:
        return SqlError(f"{prefix}: {self.message}", self.kind)


class DuplicateKeyError(SqlError):
    """A duplicate entry (1062); ``key``: the row or unique-index key already there. A pessimistic statement waits
    for that key when another transaction locks it, and checks again (``sql_front``)."""

    def __init__(self, message: str, key: bytes) -> None:
        super().__init__(message, ErrorKind.CONSTRAINT)
        self.key = key
