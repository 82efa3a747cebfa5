"""A changefeed's ``[airflow] schedule``, parsed and checked where the config is read.

The config is read in two places, ``cdcflow changefeed create`` and the changefeed's Airflow DAG file: both must
refuse a schedule with the same message, so the check lives here (with croniter, the cron parser Airflow's cron
timetables use) and not only in Airflow's timetable. ``cdcflow_airflow.dag_factory.timetable_for`` turns the
result into a timetable.

=================== ======================================================================================
``none`` / ``""``   manual runs only
``@once``           one run
``30s``, ``5m``     fixed-length windows (a data-interval delta timetable), at least ``MIN_INTERVAL``
``@daily``, ...     Airflow's cron presets
anything else       a cron expression (UTC), each run the interval between two fire times
=================== ======================================================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from cdc_core.errors import ConfigError

MIN_INTERVAL = timedelta(seconds=5)
_DURATION = re.compile(r"^([0-9]+)\s*(s|m|h)$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours"}
# Airflow's cron presets (airflow.utils.dates.cron_presets), "@once" and "@none" aside.
PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
}


@dataclass(frozen=True)
class Schedule:
    kind: str  # "none" | "once" | "every" | "cron"
    every: timedelta | None = None
    cron: str | None = None


def parse_schedule(text: str | None, where: str = "[airflow] schedule") -> Schedule:
    """The schedule ``text`` means; :class:`ConfigError` naming ``where`` and the text when it means nothing."""
    s = (text or "").strip()
    if s.lower() in ("", "none", "@none"):
        return Schedule("none")
    if s == "@once":
        return Schedule("once")
    if m := _DURATION.match(s):
        every = timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
        if every < MIN_INTERVAL:
            raise ConfigError(f"{where} {s!r}: windows shorter than {MIN_INTERVAL} are not supported")
        return Schedule("every", every=every)
    cron = PRESETS.get(s, s)
    from croniter import croniter

    if len(cron.split()) != 5 or not croniter.is_valid(cron):
        raise ConfigError(f"{where} {s!r}: neither a duration (30s, 5m, 1h), a preset ({', '.join(PRESETS)}, "
                          f"@once, none) nor a cron expression of 5 columns")
    return Schedule("cron", cron=cron)
