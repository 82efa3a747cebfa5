"""The SQL gRPC service: ``SQL.Execute`` runs a script in one session of the SQL front.

Maps ``SqlError`` kinds to status codes: bad / unsupported SQL and bad values INVALID_ARGUMENT,
unknown objects NOT_FOUND, existing objects ALREADY_EXISTS, constraint violations
FAILED_PRECONDITION, write conflicts ABORTED, reads below the GC safe point FAILED_PRECONDITION.
The message names the failing statement.
"""

from __future__ import annotations

import json

import grpc

from cdc_core.codec.value_text import json_value
from cdc_core.log import get_logger
from cdc_core.proto import sqlpb_pb2, sqlpb_pb2_grpc
from cdc_core.upstream.errors import ErrorKind, SqlError
from cdc_core.upstream.mvcc import GcSafePointPassedError
from cdc_core.upstream.sql_front import SqlEngine, StatementResult

log = get_logger("cdcflow.upstream.sql")

STATUS = {
    ErrorKind.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorKind.CONSTRAINT: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.CONFLICT: grpc.StatusCode.ABORTED,
    ErrorKind.GC: grpc.StatusCode.FAILED_PRECONDITION,
}


def result_to_pb(r: StatementResult) -> sqlpb_pb2.StatementResult:
    return sqlpb_pb2.StatementResult(
        statement=r.statement, columns=r.columns, affected_rows=r.affected_rows, commit_ts=r.commit_ts,
        rows_json=[json.dumps({k: json_value(v) for k, v in row.items()}, ensure_ascii=False, separators=(",", ":"))
                   for row in r.rows],
    )


class SqlService(sqlpb_pb2_grpc.SQLServicer):
    def __init__(self, engine: SqlEngine) -> None:
        self.engine = engine

    async def Execute(self, request: sqlpb_pb2.ExecuteRequest, context: grpc.aio.ServicerContext
                      ) -> sqlpb_pb2.ExecuteResponse:
        try:
            results = await self.engine.execute(request.sql, at_ts=request.at_ts)
        except SqlError as exc:
            log.info("sql failed", error=exc.message, kind=exc.kind.value)
            await context.abort(STATUS[exc.kind], exc.message)
            raise AssertionError("unreachable") from exc
        except GcSafePointPassedError as exc:  # a transaction outlived the GC safe point
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            raise AssertionError("unreachable") from exc
        except Exception as exc:
            log.error("sql crashed", exc_info=True)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
            raise AssertionError("unreachable") from exc
        return sqlpb_pb2.ExecuteResponse(results=[result_to_pb(r) for r in results])
