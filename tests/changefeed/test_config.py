from dataclasses import replace

import pytest

from cdc_core.changefeed import config as cfgmod
from cdc_core.errors import ConfigError
from testkit.builders import clustered_table

GOOD = """
changefeed-id = "orders-1"
sink-uri = "file:///tmp/lake"
start-ts = 100
target-ts = 200
[filter]
rules = ["shop.*", "!shop.tmp*"]
[airflow]
schedule = "@hourly"
catchup = true
[data-quality]
mode = "count"
"""


def test_parse_full_config():
    c = cfgmod.parse_config(GOOD, "x.toml")
    assert c.changefeed_id == "orders-1"
    assert c.sink_uri == "file:///tmp/lake"
    assert (c.start_ts, c.target_ts) == (100, 200)
    assert c.filter_rules == ("shop.*", "!shop.tmp*")
    assert c.schedule == "@hourly" and c.catchup is True
    assert c.dq_mode == "count"
    assert c.table_filter.match("shop", "a") and not c.table_filter.match("shop", "tmp1")


def test_defaults():
    c = cfgmod.parse_config('changefeed-id = "a"\nsink-uri = "/tmp/l"\n')
    assert c.start_ts == 0 and c.target_ts is None
    assert c.filter_rules == ("*.*",)
    assert c.schedule == "*/5 * * * *" and c.catchup is False and c.dq_mode == "checksum"
    assert c.deletion_vectors is False  # delta-rs's to_pyarrow_* readers refuse tables with them
    assert c.history_rules == () and not c.keeps_history(clustered_table())
    assert c.change_data_feed is False  # change data files cost a window's MERGE a write of its changes


def test_deletion_vectors_are_a_sink_option():
    c = cfgmod.parse_config('changefeed-id = "a"\nsink-uri = "/tmp/l"\n[sink]\ndeletion-vectors = true\n')
    assert c.deletion_vectors is True
    assert cfgmod.parse_config(c.to_toml(), "again.toml") == c


def test_history_takes_table_filter_rules():
    c = cfgmod.parse_config('changefeed-id = "a"\nsink-uri = "/tmp/l"\n[sink]\nhistory = ["test.*", "!test.tmp*"]\n')
    assert c.history_rules == ("test.*", "!test.tmp*")
    assert c.keeps_history(clustered_table()) and not c.keeps_history(clustered_table(name="tmp1"))
    assert not c.keeps_history(replace(clustered_table(), db_name="other"))
    assert cfgmod.parse_config(c.to_toml(), "again.toml") == c


def test_change_data_feed_is_a_sink_option_that_reaches_the_apply_job():
    from cdc_core.changefeed.job_args.apply_window import ApplyArgs

    c = cfgmod.parse_config('changefeed-id = "a"\nsink-uri = "/tmp/l"\n[sink]\nchange-data-feed = true\n')
    assert c.change_data_feed is True and c.deletion_vectors is False
    assert "change-data-feed = true" in c.to_toml() and cfgmod.parse_config(c.to_toml(), "again.toml") == c
    args = ApplyArgs(sink_uri="/tmp/l", changefeed_id="a", window_end_ts=5, tables=(), change_data_feed=True)
    assert ApplyArgs.from_dict(args.to_dict()).change_data_feed is True
    older = {k: v for k, v in args.to_dict().items() if k != "change_data_feed"}  # a plan written before the key
    assert ApplyArgs.from_dict(older).change_data_feed is False
    with pytest.raises(ValueError, match="change_data_feed must be true or false"):
        ApplyArgs.from_dict({**args.to_dict(), "change_data_feed": "yes"})


@pytest.mark.parametrize(
    "text, message",
    [
        ("changefeed-id = ", "not valid TOML"),
        ('sink-uri = "/x"', "`changefeed-id` is required"),
        ('changefeed-id = "a b"\nsink-uri = "/x"', "letters, digits"),
        ('changefeed-id = "a"', "`sink-uri` is required"),
        ('changefeed-id = "a"\nsink-uri = "s3://bucket/x"', "only file://"),
        ('changefeed-id = "a"\nsink-uri = "/x"\nstart-ts = "soon"', "`start-ts` must be int"),
        ('changefeed-id = "a"\nsink-uri = "/x"\nstart-ts = 5\ntarget-ts = 4', "must be greater"),
        ('changefeed-id = "a"\nsink-uri = "/x"\nbogus = 1', "unknown key"),
        ('changefeed-id = "a"\nsink-uri = "/x"\n[filter]\nrules = ["nodot"]', "filter rule"),
        ('changefeed-id = "a"\nsink-uri = "/x"\n[data-quality]\nmode = "max"', "must be one of"),
        ('changefeed-id = "a"\nsink-uri = "/x"\n[airflow]\ncatchup = "yes"', "`catchup` must be bool"),
        ('changefeed-id = "a"\nsink-uri = "/x"\n[window]\nmax-events = 0', r"\[window\]: `max-events` must be >= 1"),
        ('changefeed-id = "a"\nsink-uri = "/x"\n[window]\nmax-rows = 5', r"\[window\]: unknown key\(s\) max-rows"),
        ('changefeed-id = "a"\nsink-uri = "/x"\n[sink]\ndeletion-vectors = 1', r"`deletion-vectors` must be bool"),
        ('changefeed-id = "a"\nsink-uri = "/x"\n[sink]\nhistory = "db.*"', r"`history` must be list"),
        ('changefeed-id = "a"\nsink-uri = "/x"\n[sink]\nhistory = ["nodot"]', "filter rule"),
        ('changefeed-id = "a"\nsink-uri = "/x"\n[sink]\ndv = true', r"\[sink\]: unknown key\(s\) dv; known keys: "
                                                                 r"change-data-feed, deletion-vectors, history"),
        ('changefeed-id = "a"\nsink-uri = "/x"\n[sink]\nchange-data-feed = "yes"',
         r"\[sink\]: `change-data-feed` must be true or false \(a TOML boolean, unquoted\), got str 'yes'"),
        ('changefeed-id = "a"\nsink-uri = "/x"\n[sink]\nchange-data-feed = 1',
         r"`change-data-feed` must be true or false"),
    ],
)
def test_errors_name_the_key_and_file(text, message):
    with pytest.raises(ConfigError, match=message) as ei:
        cfgmod.parse_config(text, "feed.toml")
    assert "feed.toml" in str(ei.value)


def test_toml_round_trip_and_store(tmp_path, monkeypatch):
    monkeypatch.setenv("CDCFLOW_HOME", str(tmp_path))
    c = cfgmod.parse_config(GOOD, "x.toml")
    cfgmod.save_config(c)
    again = cfgmod.load_config("orders-1")
    assert again == c
    assert [x.changefeed_id for x in cfgmod.load_all_configs()] == ["orders-1"]
    with pytest.raises(ConfigError, match="does not exist"):
        cfgmod.load_config("nope")


def test_table_discovery_defaults_are_the_seeds() -> None:
    from cdc_core.memory import MIB, MemoryLimitConfig

    c = cfgmod.parse_config('changefeed-id = "a"\nsink-uri = "/tmp/l"\n')
    assert c.discovery_memory == MemoryLimitConfig()
    m = c.discovery_memory
    assert (m.heap_limit_bytes, m.direct_limit_bytes) == (100 * MIB, 100 * MIB)
    assert (m.heap_acquire_timeout_ms, m.direct_acquire_timeout_ms, m.heap_max_queue, m.direct_max_queue) == (
        25_000, 25_000, 1000, 1000)


def test_table_discovery_section_parsed_and_round_tripped() -> None:
    text = GOOD + """
[table-discovery]
heap-limit-bytes = 0
direct-limit-bytes = 2048
acquire-timeout-ms = 500
direct-max-queue = 7
"""
    c = cfgmod.parse_config(text, "x.toml")
    m = c.discovery_memory
    assert m.heap_limit_bytes == 0  # 0 disables
    assert (m.direct_limit_bytes, m.heap_acquire_timeout_ms, m.direct_acquire_timeout_ms) == (2048, 500, 500)
    assert (m.heap_max_queue, m.direct_max_queue) == (1000, 7)
    assert "[table-discovery]" in c.to_toml()
    assert cfgmod.parse_config(c.to_toml(), "again.toml") == c


def test_capture_auto_start_is_on_by_default_and_a_bad_value_is_named() -> None:
    assert cfgmod.parse_config(GOOD, "x.toml").capture_auto_start
    off = cfgmod.parse_config(GOOD + "\n[capture]\nauto-start = false\n", "x.toml")
    assert not off.capture_auto_start and cfgmod.parse_config(off.to_toml(), "again.toml") == off
    with pytest.raises(ConfigError, match=r"x.toml \[capture\]: `auto-start` must be bool, got str 'yes'"):
        cfgmod.parse_config(GOOD + '\n[capture]\nauto-start = "yes"\n', "x.toml")
    with pytest.raises(ConfigError, match=r"x.toml \[capture\]: unknown key\(s\) autostart"):
        cfgmod.parse_config(GOOD + "\n[capture]\nautostart = true\n", "x.toml")


@pytest.mark.parametrize(
    "section, body, message",
    [
        ("table-discovery", "heap-limit = 5", "unknown key 'heap-limit' (did you mean 'heap-limit-bytes'?)"),
        ("table-discovery", "bogus = 1", "unknown key 'bogus'"),
        ("table-discovery", "max-queue = -1", "'max-queue' must be an integer >= 0"),
        ("table-discovery", 'direct-limit-bytes = "1MB"', "'direct-limit-bytes' must be an integer >= 0"),
        ("puller", "advance-interval = 5", "unknown key(s) advance-interval"),
        ("puller", "workers-per-store = 0", "`workers-per-store` must be an integer >= 1"),
        ("puller", "advance-interval-in-ms = -1", "`advance-interval-in-ms` must be an integer >= 0"),
        ("puller", 'max-pending-bytes = "1GiB"', "`max-pending-bytes` must be an integer"),
        ("puller", "backoff-base-ms = 500\nbackoff-max-ms = 100",
         "`backoff-max-ms` (100) must be >= `backoff-base-ms`"),
    ],
)
def test_section_errors_name_the_key(section: str, body: str, message: str) -> None:
    with pytest.raises(ConfigError) as ei:
        cfgmod.parse_config(f'changefeed-id = "a"\nsink-uri = "/x"\n[{section}]\n{body}\n', "feed.toml")
    assert message in str(ei.value) and f"feed.toml [{section}]" in str(ei.value)


def test_puller_section_parsed_round_tripped_and_reaches_the_client() -> None:
    from cdc_core.puller.options import PullerOptions

    assert cfgmod.parse_config('changefeed-id = "a"\nsink-uri = "/tmp/l"\n').puller == PullerOptions()
    text = GOOD + """
[puller]
advance-interval-in-ms = 0
workers-per-store = 4
max-pending-bytes = 67108864
pull-timeout-s = 7.5
"""
    c = cfgmod.parse_config(text, "x.toml")
    assert c.puller == PullerOptions(advance_interval_ms=0, workers_per_store=4, max_pending_bytes=64 << 20,
                                     pull_timeout_s=7.5)
    kw = c.puller.client_kwargs()
    assert (kw["advance_interval_ms"], kw["workers_per_store"], kw["max_pending_bytes"]) == (0, 4, 64 << 20)
    assert cfgmod.parse_config(c.to_toml(), "again.toml") == c


def test_initial_snapshot_parses_validates_and_round_trips():
    base = 'changefeed-id = "a"\nsink-uri = "/tmp/l"\n'
    assert cfgmod.parse_config(base).initial_snapshot is False
    c = cfgmod.parse_config(base + "initial-snapshot = true\n", "feed.toml")
    assert c.initial_snapshot is True
    again = cfgmod.parse_config(c.to_toml())
    assert again.initial_snapshot is True and again == c
    assert "initial-snapshot" not in cfgmod.parse_config(base).to_toml()  # the default is left out
    with pytest.raises(ConfigError, match="`initial-snapshot` must be bool") as ei:
        cfgmod.parse_config(base + 'initial-snapshot = "yes"\n', "feed.toml")
    assert "feed.toml" in str(ei.value)


def test_tidb_addresses_parse_validate_and_round_trip() -> None:
    base = 'changefeed-id = "a"\nsink-uri = "/tmp/l"\n'
    assert cfgmod.parse_config(base).tidb is None  # the TiDB servers registered in PD
    c = cfgmod.parse_config(base + 'tidb = ["cdc@tidb-1:4000", "tidb-2:4000"]\n', "feed.toml")
    assert c.tidb == "cdc@tidb-1:4000,tidb-2:4000"
    assert cfgmod.parse_config(c.to_toml()) == c
    assert cfgmod.parse_config(base + 'tidb = "tidb-1:4000"\n').tidb == "tidb-1:4000"
    for bad, message in (('tidb = ["tidb-1"]', r"feed.toml: `tidb`: 'tidb-1' is not \[mysql://\]"),
                         ("tidb = []", "`tidb` must be a non-empty list"), ("tidb = 4000", "`tidb` must be")):
        with pytest.raises(ConfigError, match=message):
            cfgmod.parse_config(base + bad + "\n", "feed.toml")


def test_loading_a_config_stays_cheap(tmp_path) -> None:
    """Every Airflow task's DAG parse, the dag processor and every CLI call load configs: the engine's heavy
    libraries stay out of it (an event-filter expression alone brings in sqlglot, to validate it)."""
    import json
    import subprocess
    import sys

    path = tmp_path / "orders-1.toml"
    path.write_text(GOOD)
    code = f"""
import json, sys
from pathlib import Path
from cdc_core.changefeed import config
config.load_config_file(Path({str(path)!r}))
heavy = ("pyarrow", "numpy", "sqlglot", "grpc", "pyspark", "deltalake")
print(json.dumps([m for m in heavy if m in sys.modules]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
