"""A store's status server, as TiKV's (``status-addr``, published to PD as ``metapb.Store.status_address``):
``GET /metrics`` answers the store's Prometheus metrics in the text format -- here its change feed's
(``tikv_cdc_scan_tasks``, ``tikv_cdc_scan_disk_read_bytes_total``, ``tikv_cdc_captured_region_total``: what a
TiKV operator watches to see incremental scans) -- for ``cdcflow upstream status`` and any scraper.

A small HTTP/1.1 server on the cluster's event loop (one request per connection, ``Connection: close``), over TLS
when the cluster has it. Anything but ``GET /metrics`` is a 404.
"""

from __future__ import annotations

import asyncio
import ssl

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from cdc_core.log import get_logger

log = get_logger("cdcflow.upstream.status")
_MAX_REQUEST_BYTES = 16 * 1024


class StatusServer:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int = 0, *, ssl_context: ssl.SSLContext | None = None) -> int:
        """Listen on ``host:port``; returns the bound port."""
        self._server = await asyncio.start_server(self._serve, host, port, ssl=ssl_context)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            if len(head) > _MAX_REQUEST_BYTES:
                raise ValueError("request head too large")
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if method == "GET" and path.split("?", 1)[0] == "/metrics":
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
            else:
                status, ctype, body = "404 Not Found", "text/plain; charset=utf-8", b"not found\n"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode() + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError,
                ConnectionError, ssl.SSLError) as exc:
            log.debug("status request dropped", error=str(exc))
        finally:
            writer.close()
