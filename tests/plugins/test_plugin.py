"""The ``cdcflow`` plugin as Airflow loads it: in the API server's plugin manager (macros, FastAPI app, external
view), in a worker's (macros only, nothing heavy imported), and the trigger importable by its class path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cdcflow_info() -> dict:
    from airflow import plugins_manager

    infos = [p for p in plugins_manager.get_plugin_info() if p["name"] == "cdcflow"]
    assert len(infos) == 1, plugins_manager.get_plugin_info()
    return infos[0]


def test_the_api_servers_plugin_manager_loads_macros_app_and_view() -> None:
    from airflow import plugins_manager
    from fastapi import FastAPI

    info = _cdcflow_info()
    assert str(info["source"]) == "$PLUGINS_FOLDER/cdcflow_airflow/plugin.py"
    assert sorted(m.rsplit(".", 1)[-1] for m in info["macros"]) == ["datetime_to_tso", "tso_to_datetime"]
    assert [(a["url_prefix"], a["app"]) for a in info["fastapi_apps"]] == [
        ("/cdcflow", "fastapi.applications.FastAPI"), ("/cdcflow-metrics", "fastapi.applications.FastAPI")]
    assert info["external_views"] == [{"name": "Changefeeds", "href": "cdcflow/changefeeds",
                                       "url_route": "cdcflow-changefeeds", "destination": "nav",
                                       "nav_top_level": True}]
    assert not any("cdcflow" in src for src in plugins_manager.get_import_errors())
    apps, _ = plugins_manager.get_fastapi_plugins()
    ours = [a for a in apps if a["url_prefix"] == "/cdcflow"]
    assert len(ours) == 1 and isinstance(ours[0]["app"], FastAPI)
    routes = {r.path for r in ours[0]["app"].routes}
    assert {"/changefeeds", "/api/changefeeds", "/api/changefeeds/{changefeed_id}"} <= routes
    # the UI's plugins endpoint serializes the view with Airflow's own model
    from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse

    view = ExternalViewResponse.model_validate(info["external_views"][0])
    assert (view.destination, view.url_route, view.href) == ("nav", "cdcflow-changefeeds", "cdcflow/changefeeds")


def test_only_plugin_py_is_loaded_as_a_plugin_module() -> None:
    """The .airflowignore keeps the plugin manager from importing every module as a bogus top-level one."""
    from airflow._shared.plugins_manager import _load_plugins_from_plugin_directory

    plugins, errors = _load_plugins_from_plugin_directory(plugins_folder=str(ROOT / "plugins"))
    assert errors == {}
    assert [(p.name, str(p.source)) for p in plugins] == [("cdcflow", "$PLUGINS_FOLDER/cdcflow_airflow/plugin.py")]


def test_a_worker_loads_the_macros_and_nothing_heavy(tmp_path: Path) -> None:
    """What a task process does (the task SDK's plugin manager, for the macros), in a fresh interpreter."""
    code = """
import json, sys
from airflow.sdk import plugins_manager as pm
pm.integrate_macros_plugins()
from airflow.sdk.execution_time import macros
plugins, errors = pm._get_plugins()
heavy = ("pyspark", "grpc", "deltalake", "fastapi", "airflow.api_fastapi.core_api.security")
print(json.dumps({
    "plugins": [p.name for p in plugins], "errors": errors,
    "heavy": [m for m in heavy if m in sys.modules],
    "tso": macros.cdcflow.datetime_to_tso("2025-01-01T00:00:00Z"),
    "dt": macros.cdcflow.tso_to_datetime(455000614502400000).isoformat(),
}))
"""
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"), "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                         check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"plugins": ["cdcflow"], "errors": {}, "heavy": [], "tso": 455000614502400000,
                   "dt": "2025-01-01T00:00:00+00:00"}


def test_macros_render_in_a_template() -> None:
    from airflow.sdk.execution_time import macros
    from airflow.sdk.plugins_manager import integrate_macros_plugins
    from jinja2 import Environment

    integrate_macros_plugins()
    text = Environment().from_string(
        "{{ macros.cdcflow.datetime_to_tso(end) }} {{ macros.cdcflow.tso_to_datetime(ts).isoformat() }}"
    ).render(macros=macros, end="2025-01-01T00:00:01Z", ts=455000614502400000)
    assert text == f"{1735689601000 << 18} 2025-01-01T00:00:00+00:00"


def test_the_triggerer_can_import_the_trigger_by_its_serialized_class_path() -> None:
    from airflow._shared.module_loading import import_string
    from cdcflow_airflow.triggers import ResolvedTsTrigger

    classpath, kwargs = ResolvedTsTrigger("127.0.0.1:1", [["74", "75"]], 5).serialize()
    assert classpath == "cdcflow_airflow.triggers.ResolvedTsTrigger"
    assert import_string(classpath)(**kwargs).serialize() == (classpath, kwargs)
