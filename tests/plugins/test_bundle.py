"""The changefeeds' DAG bundle as Airflow's dag processor and workers use it: its folder, initialize and refresh
keeping one DAG file per config, files other processes wrote left alone when unchanged, and an edited config
making its DAG file newer than the last parse."""

from __future__ import annotations

import os
from pathlib import Path

from cdcflow_airflow import bundle

CONFIG = 'changefeed-id = "{id}"\nsink-uri = "file:///lake/{id}"\n'


def _configs(home: Path, *ids: str) -> None:
    d = home / "changefeeds"
    d.mkdir(parents=True, exist_ok=True)
    for p in d.glob("*.toml"):
        if p.stem not in ids:
            p.unlink()
    for i in ids:
        if not (d / f"{i}.toml").exists():  # a config that stays is not edited
            (d / f"{i}.toml").write_text(CONFIG.format(id=i))


def test_initialize_and_refresh_keep_one_dag_file_per_config(tmp_path, monkeypatch):
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    _configs(tmp_path, "a", "b")
    b = bundle.ChangefeedDagBundle(name=bundle.BUNDLE_NAME)
    assert b.path == tmp_path / "airflow-dags" and not b.supports_versioning
    b.initialize()
    files = {p.name: p.stat().st_mtime_ns for p in b.path.iterdir()}
    assert sorted(files) == ["cdcflow_changefeed__a.py", "cdcflow_changefeed__b.py"]
    assert "a.toml" in (b.path / "cdcflow_changefeed__a.py").read_text()
    _configs(tmp_path, "b", "c")
    b.refresh()
    after = {p.name: p.stat().st_mtime_ns for p in b.path.iterdir()}
    assert sorted(after) == ["cdcflow_changefeed__b.py", "cdcflow_changefeed__c.py"]
    assert after["cdcflow_changefeed__b.py"] == files["cdcflow_changefeed__b.py"]  # unchanged: not rewritten
    (b.path / "notes.txt").write_text("a person's file")
    _configs(tmp_path)
    b.refresh()
    assert sorted(p.name for p in b.path.iterdir()) == ["notes.txt"]  # only its own files go


def test_a_path_given_in_the_bundle_config_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path / "home"))
    _configs(tmp_path / "home", "a")
    b = bundle.ChangefeedDagBundle(name=bundle.BUNDLE_NAME, path=str(tmp_path / "elsewhere"))
    b.refresh()
    assert [p.name for p in (tmp_path / "elsewhere").iterdir()] == ["cdcflow_changefeed__a.py"]


def test_an_edited_config_makes_its_dag_file_newer_without_rewriting_it(tmp_path, monkeypatch):
    """The DAG file's text names the config only; its mtime follows the config's, which is what tells the dag
    processor to parse it again before its periodic parse (``file_parsing_sort_mode = "modified_time"``)."""
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    _configs(tmp_path, "a")
    b = bundle.ChangefeedDagBundle(name=bundle.BUNDLE_NAME)
    b.initialize()
    dag_file, config = b.path / "cdcflow_changefeed__a.py", tmp_path / "changefeeds" / "a.toml"
    text, inode = dag_file.read_text(), dag_file.stat().st_ino
    parsed = dag_file.stat().st_mtime_ns + 1  # a parse just after the file was written
    os.utime(config, ns=(parsed + 5_000_000_000, parsed + 5_000_000_000))  # the config edited 5 s later
    b.refresh()
    assert dag_file.stat().st_mtime_ns == config.stat().st_mtime_ns > parsed
    assert dag_file.read_text() == text and dag_file.stat().st_ino == inode  # touched, not rewritten
    b.refresh()  # nothing edited since: nothing changes
    assert dag_file.stat().st_mtime_ns == config.stat().st_mtime_ns
