"""PD addresses as a user gives them (TiCDC's ``--pd``: comma-separated, optionally ``http://``) and as PD's
members report them (client URLs). Free of gRPC: changefeed configs validate with it on every load.
"""

from __future__ import annotations

from cdc_core.errors import UpstreamError


def split_addrs(spec: str) -> list[str]:
    """PD addresses from ``spec``: one ``HOST:PORT`` or several, comma-separated, each optionally ``http://``."""
    out: list[str] = []
    for part in spec.split(","):
        addr = part.strip()
        if not addr:
            continue
        if addr.startswith("https://"):
            raise UpstreamError(f"PD address {addr!r}: TLS to PD is not supported yet; give an http:// address")
        addr = addr.removeprefix("http://").rstrip("/")
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise UpstreamError(f"PD address {part.strip()!r} is not HOST:PORT (or http://HOST:PORT)")
        if addr not in out:
            out.append(addr)
    if not out:
        raise UpstreamError(f"no PD address in {spec!r}")
    return out


def url_addr(url: str) -> str:
    """``host:port`` of a member's client URL (``http://host:port``)."""
    return url.strip().removeprefix("http://").removeprefix("https://").rstrip("/")
