import pytest

from cdc_core.changefeed import config as cfgmod
from cdc_core.errors import ConfigError

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
