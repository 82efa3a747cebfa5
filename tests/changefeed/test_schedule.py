"""``[airflow] schedule`` as the config reader checks it (the same for ``changefeed create`` and the DAG file)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cdc_core.changefeed.config import parse_config
from cdc_core.changefeed.schedule import Schedule, parse_schedule
from cdc_core.errors import ConfigError


@pytest.mark.parametrize(("text", "want"), [
    ("", Schedule("none")), ("none", Schedule("none")), ("@once", Schedule("once")),
    ("30s", Schedule("every", every=timedelta(seconds=30))), ("5m", Schedule("every", every=timedelta(minutes=5))),
    ("1h", Schedule("every", every=timedelta(hours=1))),
    ("@quarterly", Schedule("cron", cron="0 0 1 */3 *")), ("*/5 * * * *", Schedule("cron", cron="*/5 * * * *")),
])
def test_what_a_schedule_means(text, want):
    assert parse_schedule(text) == want


@pytest.mark.parametrize(("text", "says"), [
    ("1s", "shorter than 0:00:05"), ("every five minutes", "5 columns"), ("61 * * * *", "5 columns"),
    ("*/5 * * * * *", "5 columns"), ("@fortnightly", "5 columns"),
])
def test_a_schedule_that_means_nothing_is_refused_naming_file_and_text(text, says):
    with pytest.raises(ConfigError, match=says) as e:
        parse_config(f'changefeed-id = "a"\nsink-uri = "file:///l"\n[airflow]\nschedule = "{text}"\n', "/cf/a.toml")
    assert str(e.value).startswith(f"/cf/a.toml [airflow] schedule {text!r}")
