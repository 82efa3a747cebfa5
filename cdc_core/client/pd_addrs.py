"""PD addresses as a user gives them (TiCDC's ``--pd``: comma-separated, optionally ``http://``, or ``https://``
with TLS configured) and as PD's
members report them (client URLs). Free of gRPC: changefeed configs validate with it on every load.
"""

from __future__ import annotations

from cdc_core.errors import UpstreamError
from cdc_core.tls import ENV_CA, ENV_CERT, ENV_KEY, client_tls


def split_addrs(spec: str) -> list[str]:
    """PD addresses from ``spec``: one ``HOST:PORT`` or several, comma-separated, each optionally ``http://``."""
    out: list[str] = []
    for part in spec.split(","):
        addr = part.strip()
        if not addr:
            continue
        if addr.startswith("https://") and client_tls() is None:
            raise UpstreamError(f"PD address {addr!r}: https:// needs the TLS files (${ENV_CA}, ${ENV_CERT}, "
                                f"${ENV_KEY}), or give an http:// address")
        addr = addr.removeprefix("http://").removeprefix("https://").rstrip("/")
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
