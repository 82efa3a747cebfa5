"""CdcflowUpstreamHook: the upstream's PD address from an Airflow connection (URI or JSON in the environment),
a ping of the session upstream, TLS settings validated and refused, and the fallback without a connection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowException
from cdcflow_airflow.hooks import (
    CdcflowUpstreamHook,
    UpstreamTls,
    UpstreamTlsNotSupported,
    export_upstream_env,
    upstream_addr_for,
    upstream_pre_execute,
)

ENV = "AIRFLOW_CONN_CDCFLOW_UPSTREAM_DEFAULT"


def _host_port(pd_addr: str) -> tuple[str, int]:
    host, _, port = pd_addr.rpartition(":")
    return host, int(port)


@pytest.fixture(params=["uri", "json"])
def upstream_conn(request: pytest.FixtureRequest, pd_addr: str, monkeypatch: pytest.MonkeyPatch) -> str:
    host, port = _host_port(pd_addr)
    if request.param == "uri":
        monkeypatch.setenv(ENV, f"cdcflow-upstream://{host}:{port}")
    else:
        monkeypatch.setenv(ENV, json.dumps({"conn_type": "cdcflow_upstream", "host": host, "port": port}))
    return pd_addr


def test_reads_the_connection_and_pings_pd(upstream_conn: str) -> None:
    hook = CdcflowUpstreamHook()
    assert hook.get_connection(hook.cdcflow_conn_id).conn_type == "cdcflow_upstream"
    assert hook.get_pd_addr() == upstream_conn
    ok, message = hook.test_connection()
    assert ok, message
    assert message.startswith(f"PD at {upstream_conn} answered: TSO ")
    with hook.get_conn() as client:
        assert client.get_ts() > 0
    assert upstream_addr_for() == upstream_conn


def test_unreachable_pd_fails_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(ENV, f"cdcflow-upstream://127.0.0.1:{port}")
    ok, message = CdcflowUpstreamHook(timeout=1).test_connection()
    assert not ok and message == f"PD at 127.0.0.1:{port} does not answer"


def test_tls_is_validated_then_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not really a certificate")
    monkeypatch.setenv(ENV, json.dumps({"conn_type": "cdcflow_upstream", "host": "pd.example", "port": 2379,
                                        "extra": {"ca_cert": str(ca)}}))
    hook = CdcflowUpstreamHook()
    assert hook.settings.tls == UpstreamTls(ca_cert=str(ca))
    with pytest.raises(UpstreamTlsNotSupported, match=r"asks for TLS .* plaintext gRPC only"):
        hook.get_pd_addr()
    ok, message = hook.test_connection()
    assert not ok and "plaintext gRPC only" in message


@pytest.mark.parametrize(("extra", "error"), [
    ({"tls": True, "ca_cert": "/nonexistent/ca.pem"}, "TLS file.* not found: ca_cert=/nonexistent/ca.pem"),
    ({"tls": "sometimes"}, "`tls` must be a boolean"),
    ({"client_cert": "CERT"}, "client_cert and client_key go together"),
])
def test_bad_tls_settings_name_the_problem(extra: dict, error: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if extra.get("client_cert") == "CERT":
        (tmp_path / "c.pem").write_text("x")
        extra = {"client_cert": str(tmp_path / "c.pem")}
    monkeypatch.setenv(ENV, json.dumps({"conn_type": "cdcflow_upstream", "host": "h", "extra": extra}))
    with pytest.raises(AirflowException, match=error):
        CdcflowUpstreamHook().get_pd_addr()


def test_tls_false_and_default_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, json.dumps({"conn_type": "cdcflow_upstream", "host": "pd.example",
                                        "extra": {"tls": "false"}}))
    assert CdcflowUpstreamHook().get_pd_addr() == "pd.example:2379"


def test_without_the_connection_the_current_behaviour_stays(cdcflow_home: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_core.changefeed.config import ChangefeedConfig, save_config
    from cdc_core.client.upstream import ENV_UPSTREAM

    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv(ENV_UPSTREAM, "10.0.0.1:2379")
    assert upstream_addr_for() is None
    save_config(ChangefeedConfig(changefeed_id="cf", sink_uri="file:///tmp/x", start_ts=1))
    assert export_upstream_env("cf") is None
    import os

    assert os.environ[ENV_UPSTREAM] == "10.0.0.1:2379"
    # with the connection, a changefeed without `upstream` uses it; one with `upstream` keeps its own
    monkeypatch.setenv(ENV, "cdcflow-upstream://pd.example:2400")
    assert export_upstream_env("cf") == "pd.example:2400" and os.environ[ENV_UPSTREAM] == "pd.example:2400"
    save_config(ChangefeedConfig(changefeed_id="own", sink_uri="file:///tmp/x", start_ts=1, upstream="1.2.3.4:1"))
    assert export_upstream_env("own") is None


def test_pre_execute_hook_in_a_real_task(cdcflow_home: Path, pd_addr: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a changefeed DAG would use it: ``default_args={"pre_execute": upstream_pre_execute(id)}``."""
    import os

    from airflow.sdk import DAG, task

    from cdc_core.changefeed.config import ChangefeedConfig, save_config
    from cdc_core.client.upstream import ENV_UPSTREAM

    save_config(ChangefeedConfig(changefeed_id="cf", sink_uri="file:///tmp/x", start_ts=1))
    monkeypatch.setenv(ENV, f"cdcflow-upstream://{pd_addr}")
    monkeypatch.delenv(ENV_UPSTREAM, raising=False)
    with DAG("hooked", schedule=None, default_args={"pre_execute": upstream_pre_execute("cf")}):

        @task
        def t() -> None:
            pass

        op = t().operator
    assert op._pre_execute_hook is not None
    op._pre_execute_hook({})
    assert os.environ[ENV_UPSTREAM] == pd_addr
    monkeypatch.setenv(ENV, json.dumps({"conn_type": "cdcflow_upstream", "host": "h", "extra": {"tls": True}}))
    with pytest.raises(UpstreamTlsNotSupported):
        op._pre_execute_hook({})


def test_form_behaviour() -> None:
    b = CdcflowUpstreamHook.get_ui_field_behaviour()
    assert b["hidden_fields"] == ["schema", "login", "password"]
    assert b["relabeling"] == {"host": "PD host", "port": "PD port"}
    assert set(json.loads(b["placeholders"]["extra"])) == {"tls", "ca_cert", "client_cert", "client_key"}
