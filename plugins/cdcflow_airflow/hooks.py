"""The upstream connection: :class:`CdcflowUpstreamHook` reads the PD address of the upstream from an Airflow
connection (type ``cdcflow_upstream``, default id ``cdcflow_upstream_default``).

Connection fields: host and port are PD's address; the extra may ask for TLS::

    {"tls": true, "ca_cert": "/etc/cdcflow/ca.pem", "client_cert": "/etc/cdcflow/client.pem",
     "client_key": "/etc/cdcflow/client-key.pem"}

(any of the three files alone also means TLS). cdcflow's gRPC clients (``UpstreamClient``, the puller, the
trigger) speak plaintext only, so the hook validates and exposes the TLS settings (:class:`UpstreamTls`) but
refuses to hand out an address for a TLS connection, with :class:`UpstreamTlsNotSupported` saying why.

:func:`export_upstream_env` is what a changefeed task runs before ``cdc_core.changefeed.tasks`` (as the tasks'
``pre_execute`` hook, :func:`upstream_pre_execute`): when the changefeed's config names no ``upstream`` and the
connection exists, it points ``$CDCFLOW_UPSTREAM`` (which ``resolve_pd_addr`` reads) at the connection's address;
without the connection nothing changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

if TYPE_CHECKING:
    from cdc_core.client.upstream import UpstreamClient

DEFAULT_CONN_ID = "cdcflow_upstream_default"
CONN_TYPE = "cdcflow_upstream"
DEFAULT_PD_PORT = 2379
TLS_FILE_KEYS = ("ca_cert", "client_cert", "client_key")


class UpstreamTlsNotSupported(AirflowException):
    """The connection asks for TLS, which cdcflow's upstream clients do not speak yet."""


@dataclass(frozen=True)
class UpstreamTls:
    """TLS settings of an upstream connection (paths as given; checked to exist)."""

    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None


@dataclass(frozen=True)
class UpstreamSettings:
    host: str
    port: int
    tls: UpstreamTls | None = None

    @property
    def pd_addr(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"


def _as_bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "false", "0", "no", ""):
        return value.strip().lower() in ("true", "1", "yes")
    raise AirflowException(f"connection extra `{key}` must be a boolean, got {value!r}")


def parse_settings(host: str | None, port: int | None, extra: dict[str, Any], conn_id: str) -> UpstreamSettings:
    """Validate a connection's fields into :class:`UpstreamSettings` (errors name the connection and field)."""
    if not host:
        raise AirflowException(f"connection {conn_id!r} has no host (the upstream's PD host)")
    files = {k: extra.get(k) or None for k in TLS_FILE_KEYS}
    for key, path in files.items():
        if path is not None and not isinstance(path, str):
            raise AirflowException(f"connection {conn_id!r}: extra `{key}` must be a file path, got {path!r}")
    wants_tls = _as_bool(extra.get("tls", False), "tls") or any(files.values())
    tls = None
    if wants_tls:
        missing = [f"{k}={p}" for k, p in files.items() if p and not Path(p).is_file()]
        if missing:
            raise AirflowException(f"connection {conn_id!r}: TLS file(s) not found: {', '.join(missing)}")
        if bool(files["client_cert"]) != bool(files["client_key"]):
            raise AirflowException(f"connection {conn_id!r}: client_cert and client_key go together")
        tls = UpstreamTls(**files)
    return UpstreamSettings(host=host, port=int(port or DEFAULT_PD_PORT), tls=tls)


class CdcflowUpstreamHook(BaseHook):
    """The upstream cluster (its PD address) behind an Airflow connection; see the module docstring."""

    conn_name_attr = "cdcflow_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "cdcflow upstream (PD)"

    def __init__(self, cdcflow_conn_id: str = DEFAULT_CONN_ID, timeout: float = 10.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cdcflow_conn_id = cdcflow_conn_id
        self.timeout = timeout

    @cached_property
    def settings(self) -> UpstreamSettings:
        conn = self.get_connection(self.cdcflow_conn_id)
        return parse_settings(conn.host, conn.port, conn.extra_dejson, self.cdcflow_conn_id)

    def get_pd_addr(self) -> str:
        """``host:port`` for ``UpstreamClient`` / ``resolve_pd_addr``; raises when TLS is asked for."""
        s = self.settings
        if s.tls is not None:
            raise UpstreamTlsNotSupported(
                f"connection {self.cdcflow_conn_id!r} asks for TLS ({s.tls}), but cdcflow's upstream clients "
                "(UpstreamClient, the puller, the resolved-ts trigger) use plaintext gRPC only; remove the TLS "
                "settings or reach PD through a TLS-terminating proxy"
            )
        return s.pd_addr

    def get_conn(self) -> UpstreamClient:
        """A synchronous ``UpstreamClient`` (close it, or use it as a context manager)."""
        from cdc_core.client.upstream import UpstreamClient

        return UpstreamClient(self.get_pd_addr(), timeout=self.timeout)

    def test_connection(self) -> tuple[bool, str]:
        """Ping PD (a GetMembers); Airflow's "Test" button calls this."""
        try:
            client = self.get_conn()
        except AirflowException as exc:
            return False, str(exc)
        with client:
            if not client.ping():
                return False, f"PD at {client.pd_addr} does not answer"
            from cdc_core.codec import tso

            ts = client.get_ts()
        return True, f"PD at {client.pd_addr} answered: TSO {ts} ({tso.to_datetime(ts).isoformat()})"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "login", "password"],
            "relabeling": {"host": "PD host", "port": "PD port"},
            "placeholders": {
                "host": "127.0.0.1",
                "port": str(DEFAULT_PD_PORT),
                "extra": json.dumps({"tls": False, "ca_cert": "/path/to/ca.pem", "client_cert": "/path/to/client.pem",
                                     "client_key": "/path/to/client-key.pem"}),
            },
        }


def upstream_addr_for(conn_id: str = DEFAULT_CONN_ID) -> str | None:
    """The PD address of connection ``conn_id``, or None when no such connection is defined (callers then keep
    the current behaviour: ``$CDCFLOW_UPSTREAM``, else the running embedded upstream)."""
    hook = CdcflowUpstreamHook(conn_id)
    try:
        _ = hook.settings
    except AirflowNotFoundException:
        return None
    return hook.get_pd_addr()


def export_upstream_env(changefeed_id: str, conn_id: str = DEFAULT_CONN_ID) -> str | None:
    """Before a changefeed task: if its config has no ``upstream`` and connection ``conn_id`` exists, set
    ``$CDCFLOW_UPSTREAM`` to the connection's PD address (this task process only). Returns the address set."""
    from cdc_core.changefeed.config import load_config
    from cdc_core.client.upstream import ENV_UPSTREAM

    if load_config(changefeed_id).upstream:
        return None
    addr = upstream_addr_for(conn_id)
    if addr is not None:
        os.environ[ENV_UPSTREAM] = addr
    return addr


def upstream_pre_execute(changefeed_id: str, conn_id: str = DEFAULT_CONN_ID) -> Callable[[Any], None]:
    """A ``pre_execute`` hook for a changefeed DAG's tasks (``default_args={"pre_execute": ...}``): runs
    :func:`export_upstream_env` in the task process right before the task executes; a bad connection (e.g. TLS)
    fails the task instead of silently falling back to another upstream."""

    def pre_execute(context: Any) -> None:
        export_upstream_env(changefeed_id, conn_id)

    return pre_execute
