"""Sink URIs and the sink's layout: where a changefeed's sink (silver tables, bronze changelog) lives, how an
upstream database or table name becomes a path component of it, the path of an upstream table's silver table and the
Delta application-transaction id a changefeed commits under.

Names as path components. TiDB takes any text as a database, table or column name but an empty one or one ending in
a space (``util.IsInCorrectIdentifierName``), up to 64 characters (``mysql.MaxTableNameLength``): ``/``, ``..``,
NUL, a name ``_cdcflow`` (cdcflow's own ``<sink>/_cdcflow/``: changelog, results, moves) are all names a user may
have. Each name is therefore encoded into one component:

* letters and digits (any script: Unicode categories L, N and the marks M that combine with them), ``_ - $ .``
  stay as they are, so a name made of them keeps the path it always had (existing lakes keep working);
* every other character is escaped as each byte of its UTF-8, ``~XX`` (upper-case hex): ``/`` is ``~2F``, a space
  ``~20``, ``~`` itself ``~7E``. Percent-encoding with ``~`` for ``%``: delta-rs (``Url`` from a local path) and
  Hadoop's ``Path`` (a ``java.net.URI``) take a table path for a URL and decode a ``%XX`` in it -- delta-rs 1.6.6
  writes a table at ``<sink>/%5Fcdcflow/t``, then looks for its log in ``<sink>/_cdcflow/t`` (checked) -- and
  neither gives ``~`` a meaning;
* so are a leading ``.`` (``.`` and ``..`` would be the directory itself or its parent, ``.x`` a hidden one), a
  leading ``_`` of a database (cdcflow keeps its own directories under ``_`` names in the sink: ``_cdcflow`` as a
  database is ``~5Fcdcflow``), and a table named ``_delta_log`` (any case), which would be taken for its database
  directory's Delta log.

The encoding is reversible (:func:`component_name` reads a component back, refusing one cdcflow would not have
written), and the one place that makes it is here: silver tables, dropped copies, move records, rebuild trash and
snapshot bases all use it. What cannot be made safe is refused with the table named (:func:`check_lake_names`):
a name whose component passes what a file system takes (255 bytes, with the ``@<ts>`` a dropped copy adds), and a
column Delta cannot hold (a NUL in its name: delta-rs loses it from the schema) or that collides with the columns
cdcflow adds to a change set.

Kept apart from ``changelog`` (which needs pyarrow) so that loading a changefeed config stays cheap: every
Airflow task, DAG parse and CLI call loads one.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

from cdc_core.errors import ChangefeedError

if TYPE_CHECKING:
    from cdc_core.schema.model import TableInfo

APP_ID_PREFIX = "cdcflow/"
CDCFLOW_DIR = "_cdcflow"  # <sink>/_cdcflow: the changelog, the data-quality results, moves, dropped copies, trash
MAX_COMPONENT_BYTES = 255  # NAME_MAX of ext4, xfs, btrfs; S3 keys allow more, local sinks do not
# The longest text cdcflow appends to an encoded table name in one component: a dropped copy's "@<ts>" (a ts has
# at most 20 digits).
SUFFIX_BYTES = len("@") + 20
# Columns cdcflow adds to a table's rows in a change set (spark_jobs.normalize.net_effect.OP_COL, COMMIT_TS_COL,
# spark_jobs.normalize.mapped_values.MAPPED_COL): a table column of the same name (Spark compares names without case)
# would be overwritten by them.
RESERVED_COLUMNS = ("_cdc_op", "_cdc_commit_ts", "_cdc_mapped")
DELTA_LOG_DIR = "_delta_log"
_SAFE_ASCII = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-$.")
ESCAPE = "~"
# A snapshot base is one component for a table (``<db>.<table>``), written first under a temporary name
# ``.tmp-<component>-<32 hex>`` (spark_jobs.snapshot_load): past this many bytes the component is shortened and
# a digest of the two names keeps it unique.
_SNAPSHOT_COMPONENT_BYTES = MAX_COMPONENT_BYTES - len(".tmp-") - 1 - 32


def app_id_for(changefeed_id: str) -> str:
    """The Delta application-transaction id of a changefeed (the ``txn`` action's ``appId`` its commits carry)."""
    return f"{APP_ID_PREFIX}{changefeed_id}"


def at_barrier_app_id_for(changefeed_id: str) -> str:
    """The app-transaction id under which a changefeed records the DML committed at a DDL's commit ts, applied
    just before that DDL (``cdc_core.changefeed.barriers``): its version is the DDL's ts, which the main app id
    records only once the DDL itself is applied. A prefix of its own, so that no changefeed id can collide."""
    return f"cdcflow-at-ddl/{changefeed_id}"


def _safe(ch: str) -> bool:
    if ch < "\x80":
        return ch in _SAFE_ASCII
    return unicodedata.category(ch)[0] in "LNM"


def _escape(ch: str, what: str) -> str:
    try:
        data = ch.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 (and no TiDB name) has one
        raise ChangefeedError(f"{what}: not valid Unicode text (character U+{ord(ch):04X})") from None
    return "".join(f"{ESCAPE}{b:02X}" for b in data)


def _encode(name: str, what: str, *, database: bool, dots: bool = False) -> str:
    if not name:
        raise ChangefeedError(f"{what}: an empty name has no path")
    out = []
    for i, ch in enumerate(name):
        keep = _safe(ch) and not (i == 0 and (ch == "." or (database and ch == "_"))) and not (dots and ch == ".")
        out.append(ch if keep else _escape(ch, what))
    component = "".join(out)
    if not database and component.lower() == DELTA_LOG_DIR:
        component = _escape("_", what) + component[1:]
    return component


def name_component(name: str, *, database: bool = False) -> str:
    """The path component of a database (``database``) or table ``name`` (see the module docstring). A
    ``ChangefeedError`` for a name that has none: empty, not Unicode text, or too long once encoded."""
    what = f"{'database' if database else 'table'} name {name!r}"
    component = _encode(name, what, database=database)
    size = len(component.encode("utf-8")) + (0 if database else SUFFIX_BYTES)
    if size > MAX_COMPONENT_BYTES:
        raise ChangefeedError(
            f"{what} is {size} bytes as a lake path component ({component!r}"
            f"{'' if database else ' with the @<ts> of a dropped copy'}), more than the {MAX_COMPONENT_BYTES} a "
            "file system takes: rename it upstream or leave it out of the changefeed's filter")
    return component


def component_name(component: str, *, database: bool = False) -> str:
    """The name :func:`name_component` encoded as ``component``; a ``ValueError`` for a component it would not have
    written (a directory someone else made)."""
    data = bytearray()
    i = 0
    while i < len(component):
        ch = component[i]
        if ch == ESCAPE and _is_hex(component[i + 1:i + 3]):
            data.append(int(component[i + 1:i + 3], 16))
            i += 3
            continue
        data.extend(ch.encode("utf-8", "surrogatepass"))
        i += 1
    try:
        name = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{component!r} is not a name's path component (not UTF-8 once decoded)") from None
    if not name or _encode(name, repr(name), database=database) != component:
        raise ValueError(f"{component!r} is not the path component cdcflow writes for any name")
    return name


def qualified_name_of(db_component: str, table_component: str) -> str:
    """``<db>.<table>`` of the directory ``<sink>/<db_component>/<table_component>`` (for listings; a component
    cdcflow would not have written is shown as it is)."""

    def name(component: str, database: bool) -> str:
        try:
            return component_name(component, database=database)
        except ValueError:
            return component

    return f"{name(db_component, True)}.{name(table_component, False)}"


def _is_hex(text: str) -> bool:
    return len(text) == 2 and all(c in "0123456789ABCDEF" for c in text)


def snapshot_component(db: str, table: str) -> str:
    """The one component of a table's snapshot base, ``<db>.<table>``: both names encoded with their dots too, so
    that the ``.`` between them is the only one. Past what a temporary name of it fits in, the component is cut
    and ends in ``~`` and a digest of both names (a base's ``_table.json`` names its table: the component is never
    read back)."""
    what = f"table {db!r}.{table!r}"
    component = f"{_encode(db, what, database=True, dots=True)}.{_encode(table, what, database=False, dots=True)}"
    if len(component.encode("utf-8")) <= _SNAPSHOT_COMPONENT_BYTES:
        return component
    digest = hashlib.sha256(f"{db}\0{table}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
    head = component.encode("utf-8")[:_SNAPSHOT_COMPONENT_BYTES - len(digest) - 1].decode("utf-8", "ignore")
    return f"{head}~{digest}"


def _join(sink: str, *components: str) -> str:
    if sink.startswith("file://"):
        return os.path.join(sink[len("file://"):], *components)
    if "://" in sink:
        return "/".join([sink.rstrip("/"), *components])
    return os.path.join(sink, *components)


def database_path(sink: str, db: str) -> str:
    """``<sink>/<db>``: the directory of a database's silver tables."""
    return _join(sink, name_component(db, database=True))


def table_path_of(sink: str, db: str, table: str) -> str:
    """``<sink>/<db>/<table>``: the silver table of the upstream table ``db``.``table``.

    ``file://`` sinks become local paths; other URIs (``s3://``...) are passed to delta-rs as is.
    """
    return _join(sink, name_component(db, database=True), name_component(table))


def table_path(sink: str, table: TableInfo) -> str:
    """:func:`table_path_of` of a table."""
    return table_path_of(sink, table.db_name, table.name)


def check_lake_names(table: TableInfo) -> None:
    """Refuse a table the lake cannot hold under its names: a database or table name with no path component
    (:func:`name_component`), a column name with NUL (delta-rs drops such a field from the schema it reads) or one
    of :data:`RESERVED_COLUMNS`. The ``ChangefeedError`` names the table and every such name."""
    problems = []
    for name, database in ((table.db_name, True), (table.name, False)):
        try:
            name_component(name, database=database)
        except ChangefeedError as exc:
            problems.append(str(exc))
    for c in table.columns:
        if "\0" in c.name:
            problems.append(f"column {c.name!r} holds a NUL, which no Delta table takes in a column name")
        elif c.name.lower() in RESERVED_COLUMNS:
            problems.append(f"column {c.name!r} has the name of a column cdcflow adds to change sets")
    if problems:
        raise ChangefeedError(f"table {table.qualified_name!r} (id {table.id}) cannot be replicated into Delta: "
                              + "; ".join(problems))


def local_path(sink_uri: str) -> Path:
    """The local directory of a ``file://`` sink URI (or a bare path)."""
    if sink_uri.startswith("file://"):
        return Path(sink_uri[len("file://") :])
    if "://" in sink_uri:
        raise ValueError(f"sink-uri {sink_uri!r}: only file:// sinks are supported by the embedded engine")
    return Path(sink_uri)


HISTORY_SUFFIX = "__history"  # <db>/<table>__history: a table's SCD type 2 history (spark_jobs.load.history)


def history_path(sink: str, table: TableInfo) -> str:
    """``<sink>/<db>/<table>__history``: the history table of a table that keeps one (``[sink] history``)."""
    return table_path(sink, table) + HISTORY_SUFFIX
