"""Sink URIs: where a changefeed's sink (silver tables, bronze changelog) lives on this machine.

Kept apart from ``changelog`` (which needs pyarrow) so that loading a changefeed config stays cheap: every
Airflow task, DAG parse and CLI call loads one.
"""

from __future__ import annotations

from pathlib import Path


def local_path(sink_uri: str) -> Path:
    """The local directory of a ``file://`` sink URI (or a bare path)."""
    if sink_uri.startswith("file://"):
        return Path(sink_uri[len("file://") :])
    if "://" in sink_uri:
        raise ValueError(f"sink-uri {sink_uri!r}: only file:// sinks are supported by the embedded engine")
    return Path(sink_uri)
