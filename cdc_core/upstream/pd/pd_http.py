"""PD's HTTP API on the same address as its gRPC service, as a PD member serves both on its client URL.

A real PD multiplexes one port (cmux): gRPC's HTTP/2 and the HTTP/1.1 API (``/pd/api/v1/...``). gRPC's Python
server cannot serve HTTP/1.1, so each embedded member's gRPC server listens on a loopback port of its own and
this front owns the member's address: a connection whose first bytes are HTTP/2's client preface is piped to
the gRPC server as it is; any other is read as an HTTP/1.1 request and answered here. Routes:

``GET /pd/api/v1/min-resolved-ts``  ``{"is_real_time": true, "min_resolved_ts": N, "persist_interval": "1s"}``
                                    (tikv/pd ``server/api/min_resolved_ts.go``)

Anything else is a 404 with PD's JSON error body shape (a string).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from ssl import SSLContext

from cdc_core.log import get_logger

log = get_logger("cdcflow.upstream.pd_http")

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_REQUEST_BYTES = 16 * 1024
MIN_RESOLVED_TS_PATH = "/pd/api/v1/min-resolved-ts"


class PdFront:
    """The listener of one PD member's address: gRPC piped to ``grpc_port``, HTTP/1.1 answered by ``routes``."""

    def __init__(self, host: str, grpc_port: int, min_resolved_ts: Callable[[], int]) -> None:
        self.host = host
        self.grpc_port = grpc_port
        self.min_resolved_ts = min_resolved_ts
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int, ssl: SSLContext | None = None) -> int:
        self._server = await asyncio.start_server(self._accept, host, port, ssl=ssl)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self._conns):
                t.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            head = b""
            while len(head) < len(H2_PREFACE) and H2_PREFACE.startswith(head):
                chunk = await reader.read(len(H2_PREFACE) - len(head))
                if not chunk:
                    break
                head += chunk
            if head == H2_PREFACE:
                await self._pipe(head, reader, writer)
            elif head:
                await self._http(head, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._conns.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _pipe(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.grpc_port)
        up_writer.write(head)

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(1 << 16):
                    dst.write(data)
                    await dst.drain()
            finally:
                with contextlib.suppress(Exception):
                    dst.write_eof()

        try:
            await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))
        finally:
            up_writer.close()

    async def _http(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = head
        while b"\r\n\r\n" not in data:
            if len(data) > MAX_REQUEST_BYTES:
                return await _respond(writer, 431, "request header too large")
            chunk = await reader.read(4096)
            if not chunk:
                return None
            data += chunk
        line = data.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return await _respond(writer, 400, f"malformed request line {line!r}")
        method, target = parts[0], parts[1]
        path = target.split("?", 1)[0]
        if path == MIN_RESOLVED_TS_PATH and method == "GET":
            body = {"is_real_time": True, "min_resolved_ts": self.min_resolved_ts(), "persist_interval": "1s"}
            return await _respond(writer, 200, body)
        return await _respond(writer, 404, "404 page not found" if method == "GET" else "method not allowed")


async def _respond(writer: asyncio.StreamWriter, status: int, body: object) -> None:
    payload = json.dumps(body).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 431: "Request Header Fields Too Large"}[status]
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=UTF-8\r\n"
                 f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode() + payload)
    await writer.drain()
