"""jars.lock: it pins the JVM side of the locked delta-spark, the bootstrap's fetch checks every byte, and a
session has the jars without resolving anything."""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path

import fetch_jars as fetch  # scripts/ (pyproject's pytest pythonpath)
import pytest

from cdc_core.changefeed import delta_jars

ROOT = Path(__file__).resolve().parents[2]


def test_the_lock_pins_the_jar_of_the_locked_delta_spark_for_the_locked_spark():
    jars = {j.artifact: j for j in delta_jars.locked()}
    import pyspark

    spark_mm = ".".join(pyspark.__version__.split(".")[:2])
    spark_jar = jars[f"delta-spark_{spark_mm}_2.13"]  # delta-spark's artifact is named for the Spark it was built for
    assert spark_jar.version == importlib.metadata.version("delta-spark") == delta_jars.delta_version()
    assert jars["delta-storage"].version == spark_jar.version
    assert spark_jar.url() == ("https://repo1.maven.org/maven2/io/delta/delta-spark_4.2_2.13/4.4.0/"
                               "delta-spark_4.2_2.13-4.4.0.jar")


def test_the_bootstrap_fetched_every_locked_jar_with_its_hash():
    for jar, path in zip(delta_jars.locked(), delta_jars.jar_paths(), strict=True):
        assert hashlib.sha256(path.read_bytes()).hexdigest() == jar.sha256, path


def test_a_malformed_lock_line_is_named(tmp_path):
    lock = tmp_path / "jars.lock"
    lock.write_text("# comment\nio.delta:delta-storage:4.4.0 " + "a" * 64 + "\nio.delta:delta-storage abc\n")
    with pytest.raises(ValueError, match=r"jars.lock:3: expected 'group:artifact:version sha256'"):
        delta_jars.locked(lock)


def test_fetch_checks_the_hash_and_skips_what_is_there(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    body = b"PK\x03\x04 not really a jar"
    good = delta_jars.LockedJar("org.example", "thing", "1.0", hashlib.sha256(body).hexdigest())
    src = repo / "org" / "example" / "thing" / "1.0"
    src.mkdir(parents=True)
    (src / "thing-1.0.jar").write_bytes(body)
    dest = tmp_path / "jars"
    dest.mkdir()
    assert fetch.fetch(good, dest, repo.as_uri()) is True
    assert (dest / "thing-1.0.jar").read_bytes() == body
    assert fetch.fetch(good, dest, repo.as_uri()) is False  # there with the locked hash: not fetched again
    bad = delta_jars.LockedJar("org.example", "thing", "1.0", "0" * 64)
    (dest / "thing-1.0.jar").unlink()
    with pytest.raises(SystemExit, match=r"has sha256 .* jars\.lock pins 0000"):
        fetch.fetch(bad, dest, repo.as_uri())
    assert not list(dest.iterdir())  # nothing half-written or unchecked is left
    gone = delta_jars.LockedJar("org.example", "absent", "1.0", "0" * 64)
    monkeypatch.setattr(fetch.time, "sleep", lambda s: None)
    with pytest.raises(SystemExit, match=r"cannot download org\.example:absent:1\.0"):
        fetch.fetch(gone, dest, repo.as_uri())


def test_a_session_without_the_jars_is_told_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setenv(delta_jars.JARS_DIR_ENV, str(tmp_path))
    with pytest.raises(delta_jars.JarsMissingError, match=r"run `make venv`"):
        delta_jars.session_confs()
