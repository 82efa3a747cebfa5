"""TLS end to end: an embedded upstream serving mutual TLS on PD (gRPC and HTTP), its stores and its control port,
and TLS on its SQL front, with a CA and certificates made at test time. A changefeed runs over it into Delta; a
plaintext client and a client trusting another CA are refused with an error that says so, and a changefeed run
with the wrong CA moves no checkpoint."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cdc_core.changefeed.state import load_state
from cdc_core.client.upstream import UpstreamClient
from cdc_core.errors import ConfigError, UpstreamError
from cdc_core.tls import ENV_CA, ENV_CERT, ENV_KEY, TlsConfig
from cdc_core.upstream.cluster import ClusterConfig
from cdc_core.upstream.embedded import EmbeddedCluster
from testkit.e2e import cli, delta_rows, upstream_rows

pytestmark = [pytest.mark.e2e, pytest.mark.spark]


def _pki(d: Path, name: str) -> dict[str, Path]:
    """A CA and one certificate it signs, for servers and clients alike (as TiDB's docs make them): SANs for
    127.0.0.1-6 and localhost, server and client auth."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.DNSName("localhost"), *(x509.IPAddress(ipaddress.ip_address(f"127.0.0.{i}")) for i in range(1, 7))]
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    out = {"ca": d / f"{name}-ca.pem", "cert": d / f"{name}.pem", "key": d / f"{name}-key.pem"}
    out["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    out["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    return out


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Path]]:
    d = tmp_path_factory.mktemp("pki")
    return {"good": _pki(d, "cluster"), "other": _pki(d, "stranger")}


@pytest.fixture(scope="module")
def tls_cluster(pki: dict[str, dict[str, Path]]) -> Iterator[EmbeddedCluster]:
    g = pki["good"]
    tls = TlsConfig.from_paths(str(g["ca"]), str(g["cert"]), str(g["key"]), "test")
    with EmbeddedCluster(ClusterConfig(stores=2, min_ts_interval_ms=50, tls=tls, control_addr="127.0.0.1:0",
                                       store_hosts=("127.0.0.2", "127.0.0.3"))) as ec:
        yield ec


def _trust(monkeypatch: pytest.MonkeyPatch, files: dict[str, Path] | None, ca: Path | None = None) -> None:
    for env, key in ((ENV_CA, "ca"), (ENV_CERT, "cert"), (ENV_KEY, "key")):
        if files is None:
            monkeypatch.delenv(env, raising=False)
        else:
            monkeypatch.setenv(env, str(ca if key == "ca" and ca is not None else files[key]))


def test_a_partial_or_unreadable_tls_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="key missing"):
        TlsConfig.from_paths("a", "b", "", "here")
    with pytest.raises(ConfigError, match=r"here: the TLS CA .*nope.pem is not a readable file"):
        TlsConfig.from_paths(str(tmp_path / "nope.pem"), str(tmp_path), str(tmp_path), "here")


def test_only_clients_with_the_clusters_ca_and_a_certificate_are_served(tls_cluster: EmbeddedCluster,
                                                                      pki: dict[str, Any],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _trust(monkeypatch, None)
    with UpstreamClient(tls_cluster.pd_addr, timeout=5) as c, pytest.raises(UpstreamError, match="TLS"):
        c.get_ts()  # plaintext to a TLS port
    _trust(monkeypatch, pki["good"], ca=pki["other"]["ca"])
    with UpstreamClient(tls_cluster.pd_addr, timeout=5) as c, pytest.raises(UpstreamError, match="TLS handshake"):
        c.get_ts()  # the server's certificate is not signed by the CA this client trusts
    _trust(monkeypatch, pki["good"])
    with UpstreamClient(tls_cluster.pd_addr, timeout=30) as c:
        assert c.get_ts() > 0
        assert sorted(s.address.rsplit(":", 1)[0] for s in c.all_stores()) == ["127.0.0.2", "127.0.0.3"]
        c.execute("CREATE DATABASE IF NOT EXISTS probe")
        assert isinstance(c.sql()._connect()._sock, ssl.SSLSocket)  # the SQL connection is TLS too
    res = CliRunner().invoke(__import__("cdc_core.cli.upstream_cmd", fromlist=["app"]).app,
                             ["fault", "gc", "--control", tls_cluster.control_addr])
    assert res.exit_code == 0, res.output  # the control port: mutual TLS as well


def _start_spark_without_tls() -> None:
    """Start Spark and its Python workers before the TLS variables are set, as a cluster's executors start where
    the driver's environment never was: the window's upstream reads on them (the checks' point reads) must carry
    the driver's TLS files instead of finding them in their environment."""
    from spark_jobs.session import get_spark

    assert get_spark("cdcflow").range(4).mapInArrow(lambda batches: batches, "id long").count() == 4


def test_a_changefeed_runs_over_tls_and_the_wrong_ca_moves_no_checkpoint(
        tls_cluster: EmbeddedCluster, pki: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _start_spark_without_tls()
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CDCFLOW_UPSTREAM", tls_cluster.pd_addr)
    _trust(monkeypatch, pki["good"])
    db, sink = "tlsdb", tmp_path / "lake"
    with UpstreamClient(tls_cluster.pd_addr) as c:
        c.execute(f"CREATE DATABASE {db}; CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(8), UNIQUE KEY u (v))")
        start = c.get_ts()
        c.execute(f"INSERT INTO {db}.t VALUES (1, 'a'), (2, 'b'), (3, 'c'); UPDATE {db}.t SET id = 4 WHERE id = 1; "
                  f"DELETE FROM {db}.t WHERE id = 2")
        cfg = tmp_path / "tls.toml"
        cfg.write_text(f'changefeed-id = "tls"\nsink-uri = "file://{sink}"\nstart-ts = {start}\n'
                       f'[filter]\nrules = ["{db}.*"]\n')
        cli("changefeed", "create", "--config", str(cfg))
        t1 = c.get_ts()
        cli("changefeed", "run", "tls", "--until-ts", str(t1))
        assert load_state("tls").checkpoint_ts == t1
        assert delta_rows(sink, db, "t", "id") == upstream_rows(c, db, "t", "id", t1)
        c.execute(f"INSERT INTO {db}.t VALUES (5, 'e')")
        t2 = c.get_ts()
    _trust(monkeypatch, pki["good"], ca=pki["other"]["ca"])
    from testkit.e2e import cli_app

    res = CliRunner().invoke(cli_app(), ["changefeed", "run", "tls", "--until-ts", str(t2)])
    assert res.exit_code != 0 and "TLS handshake" in str(res.exception), (res.output, res.exception)
    assert load_state("tls").checkpoint_ts == t1
