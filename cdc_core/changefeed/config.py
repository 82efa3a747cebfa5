"""Changefeed configuration: a TiCDC-style TOML file, validated on load with errors naming the key.

```toml
changefeed-id = "orders"
sink-uri = "file:///data/lake"
start-ts = 449816189483237377      # optional: absent = now (PD TSO at create time)
target-ts = 0                      # optional: 0/absent = unbounded
pd = ["pd-1:2379", "pd-2:2379"]    # optional: PD members (any of them; the client follows the leader);
                                   # default: the running embedded upstream. `upstream = "host:2379"` is
                                   # the older spelling (one address or a comma-separated list)
tidb = ["tidb-1:4000"]             # optional: TiDB's SQL port(s), `[user[:password]@]host:port` (user root,
                                   # password $CDCFLOW_TIDB_PASSWORD by default); default: the TiDB servers
                                   # registered in PD (/topology/tidb/), then $CDCFLOW_TIDB
initial-snapshot = false           # true: the first window first loads every replicated table's rows at
                                   # start-ts (a `snapshot` window); false: tables start empty at start-ts

[filter]
rules = ["shop.*", "!shop.tmp*"]

[airflow]
schedule = "*/5 * * * *"           # cron or preset; each run is one window
catchup = false

[data-quality]
mode = "checksum"                  # checksum | count | off

[window]
max-events = 1000000               # a window with more row events is applied in sub-windows of at most this
                                   # many (cut at commit ts points), each checked and checkpointed on its own

[table-discovery]                  # memory for listing the upstream's tables (seed 001); 0 disables
heap-limit-bytes = 104857600       # decoded table lists (default 100 MiB)
direct-limit-bytes = 104857600     # received listing messages (default 100 MiB)
acquire-timeout-ms = 25000         # or heap-acquire-timeout-ms / direct-acquire-timeout-ms
max-queue = 1000                   # or heap-max-queue / direct-max-queue

[puller]                           # see cdc_core.puller.options for every key
advance-interval-in-ms = 100       # resolved-ts advance throttle (0 = on every batch)
workers-per-store = 2
max-pending-bytes = 1073741824
```
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeGuard, get_args

from cdc_core import durable
from cdc_core.changefeed.schedule import parse_schedule
from cdc_core.client.pd_addrs import split_addrs
from cdc_core.codec.sink_uri import local_path
from cdc_core.errors import ConfigError, UpstreamError
from cdc_core.filter.event_filter import EventFilter
from cdc_core.filter.table_filter import TableFilter
from cdc_core.home import changefeeds_dir
from cdc_core.memory import MemoryLimitConfig
from cdc_core.puller.options import PullerOptions
from cdc_core.schema.model import TableInfo

_ID_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,127}$")
SINK_KEYS = frozenset({"deletion-vectors", "change-data-feed", "history"})
_TOP_KEYS = {
    "changefeed-id", "sink-uri", "start-ts", "target-ts", "pd", "upstream", "tidb", "initial-snapshot", "filter",
    "airflow", "data-quality", "table-discovery", "puller", "window", "sink", "capture",
}
# What a window's checks compare with the upstream: rows and a checksum, the row count only, or nothing (the
# structural checks still run). The jobs' arguments (``job_args``) take the same type.
DqMode = Literal["checksum", "count", "off"]
DQ_MODES: tuple[DqMode, ...] = get_args(DqMode)


def is_dq_mode(v: object) -> TypeGuard[DqMode]:
    """Whether ``v`` is one of ``DQ_MODES``."""
    return v in DQ_MODES


@dataclass(frozen=True)
class ChangefeedConfig:
    changefeed_id: str
    sink_uri: str
    start_ts: int = 0  # 0 = not yet fixed (resolved to "now" by `changefeed create`)
    target_ts: int | None = None
    upstream: str | None = None  # PD addresses, comma-separated (from `pd` or `upstream`)
    tidb: str | None = None  # TiDB SQL addresses, comma-separated (None: the ones registered in PD)
    # The first window loads the replicated tables' rows at start-ts first (mode "snapshot").
    initial_snapshot: bool = False
    filter_rules: tuple[str, ...] = ("*.*",)
    schedule: str = "*/5 * * * *"
    catchup: bool = False
    dq_mode: DqMode = "checksum"
    # A window of more row events than this is applied in sub-windows of at most this many (issue 18).
    window_max_events: int = 1_000_000
    # [sink] deletion-vectors: the silver tables take Delta deletion vectors, so that a window's MERGE marks the rows
    # it replaces instead of rewriting the files that hold them (spark_jobs.load.merge_on_read). Readers need deletion
    # vector support (Spark, delta-rs's DeltaTable.scan / QueryBuilder; not its to_pyarrow_* ).
    deletion_vectors: bool = False
    # [sink] history: table-filter rules ([filter] rules' syntax) of the tables that keep an SCD type 2 history table
    # <db>/<table>__history (spark_jobs.load.history); none by default.
    history_rules: tuple[str, ...] = ()
    # [sink] change-data-feed: the silver tables take Delta's change data feed (``delta.enableChangeDataFeed``), every
    # window's commit writing its net changes per key as change data (docs/delta-writers.md, "Change data feed"). On
    # an existing table it is turned on at the next window and the feed starts there; false leaves a table's own
    # setting alone (both writers honour a feed a user turned on).
    change_data_feed: bool = False
    # `[[filter.event-filters]]` tables as written (validated on load) and `ignore-txn-start-ts`.
    event_filter_rules: tuple[dict[str, Any], ...] = ()
    ignore_txn_start_ts: tuple[int, ...] = ()
    # Client-side memory limits of table discovery (cdc_core.client.table_discovery).
    discovery_memory: MemoryLimitConfig = field(default_factory=MemoryLimitConfig)
    puller: PullerOptions = field(default_factory=PullerOptions)
    # [capture] auto-start: each DAG run starts the changefeed's capture (cdc_core.capture.control) when none runs,
    # so its windows read the capture's parts instead of subscribing every region (issue 55).
    capture_auto_start: bool = True
    source: str = field(default="", compare=False)  # where it was read from, for error messages

    @property
    def table_filter(self) -> TableFilter:
        return TableFilter(list(self.filter_rules))

    @property
    def history_filter(self) -> TableFilter:
        """The tables with a history table (``[sink] history``; no rule matches nothing)."""
        return TableFilter(list(self.history_rules))

    def keeps_history(self, table: TableInfo) -> bool:
        """Whether ``table`` (by its names) keeps a history table."""
        return bool(self.history_rules) and self.history_filter.match(table.db_name, table.name)

    @property
    def event_filter(self) -> EventFilter:
        return EventFilter.from_config(list(self.event_filter_rules), list(self.ignore_txn_start_ts),
                                       self.source or self.changefeed_id)

    @property
    def sink_path(self) -> Path:
        return local_path(self.sink_uri)

    def with_start_ts(self, ts: int) -> ChangefeedConfig:
        return replace(self, start_ts=ts)

    def to_toml(self) -> str:
        lines = [
            f"changefeed-id = {_q(self.changefeed_id)}",
            f"sink-uri = {_q(self.sink_uri)}",
            f"start-ts = {self.start_ts}",
        ]
        if self.target_ts:
            lines.append(f"target-ts = {self.target_ts}")
        if self.upstream:
            lines.append(f"pd = {_toml_value(self.upstream.split(','))}")
        if self.tidb:
            lines.append(f"tidb = {_toml_value(self.tidb.split(','))}")
        if self.initial_snapshot:
            lines.append("initial-snapshot = true")
        rules = ", ".join(_q(r) for r in self.filter_rules)
        lines += ["", "[filter]", f"rules = [{rules}]"]
        if self.ignore_txn_start_ts:
            lines.append(f"ignore-txn-start-ts = [{', '.join(str(t) for t in self.ignore_txn_start_ts)}]")
        for rule in self.event_filter_rules:
            lines += ["", "[[filter.event-filters]]", *(f"{k} = {_toml_value(v)}" for k, v in rule.items())]
        lines += ["", "[airflow]", f"schedule = {_q(self.schedule)}", f"catchup = {str(self.catchup).lower()}"]
        lines += ["", "[data-quality]", f"mode = {_q(self.dq_mode)}"]
        lines += ["", "[window]", f"max-events = {self.window_max_events}"]
        lines += ["", "[sink]", f"deletion-vectors = {str(self.deletion_vectors).lower()}",
                  f"change-data-feed = {str(self.change_data_feed).lower()}"]
        if self.history_rules:
            lines.append(f"history = [{', '.join(_q(r) for r in self.history_rules)}]")
        lines += ["", "[table-discovery]", *(f"{k} = {v}" for k, v in self.discovery_memory.to_mapping().items())]
        lines += ["", "[capture]", f"auto-start = {str(self.capture_auto_start).lower()}"]
        lines += ["", "[puller]", *(f"{k} = {v}" for k, v in self.puller.to_mapping().items()), ""]
        return "\n".join(lines)


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_value(v: Any) -> str:
    if isinstance(v, str):
        return _q(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def _get(d: dict[str, Any], key: str, typ: type | tuple[type, ...], where: str, default: Any = None) -> Any:
    if key not in d:
        return default
    v = d[key]
    if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
        names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise ConfigError(f"{where}: `{key}` must be {names}, got {type(v).__name__} {v!r}")
    return v


def _tidb_addrs(data: dict[str, Any], source: str) -> str | None:
    """`tidb`: a list of TiDB SQL addresses or one (comma-separated) string, each checked."""
    from cdc_core.client.tidb_sql import parse_addresses

    raw = data.get("tidb")
    if raw is None:
        return None
    items = raw if isinstance(raw, list) else [raw]
    if not items or not all(isinstance(x, str) and x.strip() for x in items):
        raise ConfigError(f"{source}: `tidb` must be a non-empty list of \"host:port\" strings, got {raw!r}")
    spec = ",".join(x.strip() for x in items)
    parse_addresses(spec, f"{source}: `tidb`")
    return spec


def _pd_addrs(data: dict[str, Any], source: str) -> str | None:
    """`pd` (a list of PD addresses, or one string) or `upstream` (its older name), as one comma-separated
    string, each address checked; None when neither is set."""
    if "pd" in data and "upstream" in data:
        raise ConfigError(f"{source}: give `pd` or `upstream` (its older name), not both")
    key = "pd" if "pd" in data else "upstream"
    value = _get(data, key, (str, list), source)
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(x, str) for x in items):
        raise ConfigError(f"{source}: `{key}` must be a PD address or a list of them (\"host:2379\"), got {value!r}")
    try:
        return ",".join(split_addrs(",".join(items)))
    except UpstreamError as exc:
        raise ConfigError(f"{source}: `{key}`: {exc}") from exc


def parse_config(text: str, source: str = "<string>") -> ChangefeedConfig:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    unknown = set(data) - _TOP_KEYS
    if unknown:
        known = ", ".join(sorted(_TOP_KEYS))
        raise ConfigError(f"{source}: unknown key(s) {', '.join(sorted(unknown))}; known keys: {known}")
    cid = _get(data, "changefeed-id", str, source)
    if cid is None:
        raise ConfigError(f"{source}: `changefeed-id` is required")
    if not _ID_RE.match(cid):
        raise ConfigError(f"{source}: `changefeed-id` {cid!r} must be letters, digits, '-' or '_' (max 128)")
    sink = _get(data, "sink-uri", str, source)
    if not sink:
        raise ConfigError(f"{source}: `sink-uri` is required (e.g. \"file:///data/lake\")")
    try:
        local_path(sink)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
    start_ts = _get(data, "start-ts", int, source, 0)
    target_ts = _get(data, "target-ts", int, source, 0) or None
    if start_ts < 0 or (target_ts is not None and target_ts < 0):
        raise ConfigError(f"{source}: `start-ts` / `target-ts` must be >= 0")
    if target_ts is not None and start_ts and target_ts <= start_ts:
        raise ConfigError(f"{source}: `target-ts` {target_ts} must be greater than `start-ts` {start_ts}")
    upstream = _pd_addrs(data, source)
    tidb = _tidb_addrs(data, source)
    initial_snapshot = _get(data, "initial-snapshot", bool, source, False)

    flt = _get(data, "filter", dict, source, {})
    rules = _get(flt, "rules", list, f"{source} [filter]", ["*.*"])
    try:
        TableFilter(rules)  # validate now, naming the rule and the file
    except ConfigError as exc:
        raise ConfigError(f"{source} [filter]: {exc}") from exc
    unknown_filter = set(flt) - {"rules", "event-filters", "ignore-txn-start-ts"}
    if unknown_filter:
        raise ConfigError(f"{source} [filter]: unknown key(s) {', '.join(sorted(unknown_filter))}")
    event_rules = flt.get("event-filters", [])
    txn_ts = flt.get("ignore-txn-start-ts", [])
    EventFilter.from_config(event_rules, txn_ts, source)  # validate now: expressions, regexes, event types

    af = _get(data, "airflow", dict, source, {})
    schedule = _get(af, "schedule", str, f"{source} [airflow]", "*/5 * * * *")
    parse_schedule(schedule, f"{source} [airflow] schedule")  # refused here as the DAG file would refuse it
    catchup = _get(af, "catchup", bool, f"{source} [airflow]", False)

    dq = _get(data, "data-quality", dict, source, {})
    mode = _get(dq, "mode", str, f"{source} [data-quality]", "checksum")
    if not is_dq_mode(mode):
        raise ConfigError(f"{source} [data-quality]: `mode` must be one of {', '.join(DQ_MODES)}, got {mode!r}")

    win = _get(data, "window", dict, source, {})
    unknown_window = set(win) - {"max-events"}
    if unknown_window:
        raise ConfigError(f"{source} [window]: unknown key(s) {', '.join(sorted(unknown_window))}")
    max_events = _get(win, "max-events", int, f"{source} [window]", 1_000_000)
    if max_events < 1:
        raise ConfigError(f"{source} [window]: `max-events` must be >= 1, got {max_events}")

    sink_opts = _get(data, "sink", dict, source, {})
    unknown_sink = set(sink_opts) - SINK_KEYS
    if unknown_sink:
        raise ConfigError(f"{source} [sink]: unknown key(s) {', '.join(sorted(unknown_sink))}; known keys: "
                          f"{', '.join(sorted(SINK_KEYS))}")
    deletion_vectors = _get(sink_opts, "deletion-vectors", bool, f"{source} [sink]", False)
    history_rules = _get(sink_opts, "history", list, f"{source} [sink]", [])
    try:
        TableFilter(history_rules)  # validate now, naming the rule and the file
    except ConfigError as exc:
        raise ConfigError(f"{source} [sink] history: {exc}") from exc
    change_data_feed = sink_opts.get("change-data-feed", False)
    if not isinstance(change_data_feed, bool):
        raise ConfigError(f"{source} [sink]: `change-data-feed` must be true or false (a TOML boolean, unquoted), "
                          f"got {type(change_data_feed).__name__} {change_data_feed!r}")

    capture = _get(data, "capture", dict, source, {})
    unknown_capture = set(capture) - {"auto-start"}
    if unknown_capture:
        raise ConfigError(f"{source} [capture]: unknown key(s) {', '.join(sorted(unknown_capture))}")
    capture_auto_start = _get(capture, "auto-start", bool, f"{source} [capture]", True)

    discovery = _get(data, "table-discovery", dict, source, {})
    discovery_memory = MemoryLimitConfig.from_mapping(discovery, where=f"{source} [table-discovery]")
    puller = PullerOptions.from_mapping(_get(data, "puller", dict, source, {}), where=f"{source} [puller]")

    return ChangefeedConfig(
        changefeed_id=cid, sink_uri=sink, start_ts=start_ts, target_ts=target_ts, upstream=upstream, tidb=tidb,
        initial_snapshot=initial_snapshot,
        filter_rules=tuple(rules), schedule=schedule, catchup=catchup, dq_mode=mode, window_max_events=max_events,
        deletion_vectors=deletion_vectors, change_data_feed=change_data_feed, discovery_memory=discovery_memory,
        puller=puller, source=source,
        capture_auto_start=capture_auto_start, event_filter_rules=tuple(dict(r) for r in event_rules),
        ignore_txn_start_ts=tuple(txn_ts), history_rules=tuple(history_rules),
    )


def load_config_file(path: Path) -> ChangefeedConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read changefeed config {path}: {exc.strerror}") from exc
    return parse_config(text, str(path))


def config_path(changefeed_id: str) -> Path:
    return changefeeds_dir() / f"{changefeed_id}.toml"


def load_config(changefeed_id: str) -> ChangefeedConfig:
    p = config_path(changefeed_id)
    if not p.exists():
        raise ConfigError(
            f"changefeed {changefeed_id!r} does not exist (no {p}); create it with `cdcflow changefeed create`"
        )
    return load_config_file(p)


def load_all_configs() -> list[ChangefeedConfig]:
    """Every changefeed config in ``$CDCFLOW_HOME/changefeeds`` (sorted by id); a bad file raises."""
    d = changefeeds_dir()
    if not d.is_dir():
        return []
    return [load_config_file(p) for p in sorted(d.glob("*.toml"))]


def save_config(cfg: ChangefeedConfig) -> Path:
    d = changefeeds_dir()
    d.mkdir(parents=True, exist_ok=True)
    p = config_path(cfg.changefeed_id)
    durable.write_file(p, cfg.to_toml())
    return p
