"""``cdcflow``'s entry point: a command imports only its own group, usage errors read like click's (exit 2, no
traceback), and ``--help`` still lists every group."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_core.cli.main import _GROUPS


def run(tmp_path: Path, *args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CDCFLOW_HOME": str(tmp_path), "COLUMNS": "200"}
    # The installed entry point, as users run it (its name is the usage line's program name).
    argv = [sys.executable, "-c", code] if code else [str(Path(sys.executable).parent / "cdcflow")]
    return subprocess.run([*argv, *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_command_imports_its_group_only(tmp_path: Path) -> None:
    # main() ends the process itself (cdc_core.process_exit): the probe reports from an atexit handler, which it runs.
    probe = ("import atexit, sys; sys.argv = ['cdcflow', 'tso', 'decode', '470661621350662143'];"
             "from cdc_core.cli.main import main\n"
             "atexit.register(lambda: print(sorted(m for m in sys.modules if m.startswith('cdc_core.cli.')"
             " or m in ('pyarrow', 'sqlglot', 'pyspark', 'changefeed')), file=sys.stderr))\n"
             "main()")
    proc = run(tmp_path, code=probe)
    assert proc.returncode == 0, proc.stderr
    assert '"physical_ms"' in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "['cdc_core.cli.main', 'cdc_core.cli.tso_cmd']"


def test_help_lists_every_group_with_its_help(tmp_path: Path) -> None:
    proc = run(tmp_path, "--help")
    assert proc.returncode == 0, proc.stderr
    for name, (_, _, help_text) in _GROUPS.items():
        assert name in proc.stdout and help_text.split(";")[0] in proc.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["bogus"], "No such command 'bogus'"),
    (["tso", "bogus"], "No such command 'bogus'"),
    (["upstream", "sql", "--nope"], "No such option: --nope"),
    (["tso", "decode", "abc"], "Invalid value for 'ts'"),
])
def test_usage_errors_exit_2_with_the_usage_and_no_traceback(tmp_path: Path, args: list[str], message: str) -> None:
    proc = run(tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Usage: cdcflow" in proc.stderr
    assert "Traceback" not in proc.stderr and "traceback in the cdcflow log" not in proc.stderr


def test_no_arguments_show_the_help(tmp_path: Path) -> None:
    proc = run(tmp_path)
    assert proc.returncode == 2 and "changefeed" in proc.stdout + proc.stderr
    assert "Error" not in proc.stderr, proc.stderr


def test_an_app_built_without_argv_runs_every_group_in_one_process(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cdc_core.cli.main import build_app

    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    app, runner = build_app(), CliRunner()
    decoded = runner.invoke(app, ["tso", "decode", "470661621350662143"])
    assert decoded.exit_code == 0 and '"physical_ms"' in decoded.output, decoded.output
    listed = runner.invoke(app, ["changefeed", "list"])  # a placeholder group would answer "No such command"
    assert listed.exit_code == 0 and "checkpoint" in listed.output, listed.output


def test_an_error_naming_a_config_section_is_shown_as_written(tmp_path: Path) -> None:
    """Messages name sections in brackets (``[airflow] schedule``); rich must not take them for markup."""
    config = tmp_path / "bad.toml"
    config.write_text('changefeed-id = "bad"\nsink-uri = "file:///l"\n[airflow]\nschedule = "sometimes"\n')
    proc = run(tmp_path, "changefeed", "create", "--config", str(config))
    assert proc.returncode == 1 and f"error: {config} [airflow] schedule 'sometimes': neither" in proc.stderr


def test_list_shows_a_broken_config_beside_the_others(tmp_path: Path) -> None:
    d = tmp_path / "changefeeds"
    d.mkdir()
    (d / "good.toml").write_text('changefeed-id = "good"\nsink-uri = "file:///l"\n')
    (d / "bad.toml").write_text('changefeed-id = "bad"\n')
    proc = run(tmp_path, "changefeed", "list")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines() if line.count("│") > 2}
    assert "no state" in rows["good"] and "config error" in rows["bad"] and "sink-uri" in rows["bad"], proc.stdout
