"""TLS to the upstream, as TiCDC's ``[security]`` section sets it: one CA, certificate and key for mutual TLS to PD
and TiKV (gRPC, and PD's HTTP API), and TLS to TiDB's SQL port (the server checked against the CA, the same
certificate offered).

A client takes its files from ``$CDCFLOW_TLS_CA``, ``$CDCFLOW_TLS_CERT`` and ``$CDCFLOW_TLS_KEY`` (all three or
none: :func:`client_tls`); the embedded upstream from ``cdcflow upstream start --tls-ca/--tls-cert/--tls-key``. Every
channel and connection to the upstream is made here (:func:`grpc_channel`, :func:`aio_grpc_channel`, and the
contexts for PyMySQL and httpx), so that none is plaintext when TLS is configured.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdc_core.errors import ConfigError

if TYPE_CHECKING:  # grpc is imported where a channel is made: config validation stays free of it
    import grpc

ENV_CA, ENV_CERT, ENV_KEY = "CDCFLOW_TLS_CA", "CDCFLOW_TLS_CERT", "CDCFLOW_TLS_KEY"


@dataclass(frozen=True)
class TlsConfig:
    ca_path: str
    cert_path: str
    key_path: str

    @classmethod
    def from_paths(cls, ca: str, cert: str, key: str, where: str) -> TlsConfig | None:
        """All three paths or none (None: no TLS); a partial set or an unreadable file is a ``ConfigError``."""
        given = {"CA": ca, "certificate": cert, "key": key}
        if not any(given.values()):
            return None
        missing = [name for name, path in given.items() if not path]
        if missing:
            raise ConfigError(f"{where}: TLS needs a CA, a certificate and a key; {', '.join(missing)} missing")
        for name, path in given.items():
            if not Path(path).is_file():
                raise ConfigError(f"{where}: the TLS {name} {path} is not a readable file")
        return cls(*(str(Path(p).resolve()) for p in (ca, cert, key)))

    def _read(self) -> tuple[bytes, bytes, bytes]:
        return tuple(Path(p).read_bytes() for p in (self.ca_path, self.cert_path, self.key_path))  # type: ignore

    def channel_credentials(self) -> grpc.ChannelCredentials:
        import grpc

        ca, cert, key = self._read()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)

    def server_credentials(self) -> grpc.ServerCredentials:
        """Mutual TLS: a client without a certificate the CA signed is refused, as TiKV does with its CA set."""
        import grpc

        ca, cert, key = self._read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_path)
        ctx.load_cert_chain(self.cert_path, self.key_path)
        return ctx

    def server_context(self, *, alpn: list[str] | None = None, require_client_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.ca_path)
        ctx.load_cert_chain(self.cert_path, self.key_path)
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
        if alpn:
            ctx.set_alpn_protocols(alpn)
        return ctx

    def pymysql_ssl(self) -> dict[str, Any]:
        """PyMySQL's ``ssl`` argument: the server verified against the CA, this certificate offered."""
        return {"ca": self.ca_path, "cert": self.cert_path, "key": self.key_path}


@cache
def _from_env(ca: str, cert: str, key: str) -> TlsConfig | None:
    return TlsConfig.from_paths(ca, cert, key, f"${ENV_CA} / ${ENV_CERT} / ${ENV_KEY}")


_UNSET: Any = object()
_pinned: Any = _UNSET


@contextmanager
def pinned(tls: TlsConfig | None) -> Iterator[None]:
    """Use ``tls`` (the driver's :func:`client_tls`) in this process while the block runs, whatever the environment
    says. For Spark's Python workers: they are forked from a daemon that started with the environment of the first
    job, and on a cluster they run where the driver's environment never was, so a job's upstream reads carry the
    driver's TLS files with them (the same paths on every node, as TiCDC's ``[security]`` expects)."""
    global _pinned
    before, _pinned = _pinned, tls
    try:
        yield
    finally:
        _pinned = before


def client_tls() -> TlsConfig | None:
    """The client's TLS files (:func:`pinned`, else the environment), or None for plaintext."""
    if _pinned is not _UNSET:
        return _pinned  # type: ignore[no-any-return]
    return _from_env(os.environ.get(ENV_CA, ""), os.environ.get(ENV_CERT, ""), os.environ.get(ENV_KEY, ""))


def http_scheme() -> str:
    return "https" if client_tls() else "http"


def grpc_channel(addr: str, options: list[tuple[str, Any]] | None = None) -> grpc.Channel:
    import grpc

    tls = client_tls()
    if tls is None:
        return grpc.insecure_channel(addr, options=options)
    return grpc.secure_channel(addr, tls.channel_credentials(), options=options)


def aio_grpc_channel(addr: str, options: list[tuple[str, Any]] | None = None) -> grpc.aio.Channel:
    import grpc

    tls = client_tls()
    if tls is None:
        return grpc.aio.insecure_channel(addr, options=options)
    return grpc.aio.secure_channel(addr, tls.channel_credentials(), options=options)


def httpx_verify() -> ssl.SSLContext | bool:
    """httpx's ``verify``: the client context (CA and certificate) with TLS, else the default."""
    tls = client_tls()
    return tls.client_context() if tls else True


def handshake_hint(details: str) -> str:
    """A hint for a gRPC or SQL failure that reads like a failed TLS handshake, else ""."""
    low = details.lower()
    if "handshake" in low or "certificate" in low or "ssl" in low:
        return (f" (a TLS handshake failed: check ${ENV_CA}, ${ENV_CERT} and ${ENV_KEY} against the upstream's "
                "certificates)")
    if client_tls() is None and ("socket closed" in low or "connection reset" in low):
        return (f" (if the upstream serves TLS, give its CA and a client certificate: ${ENV_CA}, ${ENV_CERT}, "
                f"${ENV_KEY})")
    return ""
