"""The error types users see. Anything derived from ``CdcflowError`` is printed without a traceback."""

from __future__ import annotations


class CdcflowError(Exception):
    """A failure a user can act on; the message names what failed and where."""


class ConfigError(CdcflowError):
    """A malformed or invalid changefeed / upstream configuration."""


class UpstreamError(CdcflowError):
    """The upstream cluster could not be reached or refused a request."""


class ChangefeedError(CdcflowError):
    """A changefeed cannot make progress; its checkpoint does not move."""


class DataQualityError(ChangefeedError):
    """A data-quality check failed at a barrier."""


class TransientError(CdcflowError):
    """A failure that a retry can fix (a process of the job killed, a Spark cluster member lost): the step fails
    and is retried, and the changefeed stays normal, as TiCDC retries what it does not know to be permanent."""


class EmbeddedUpstreamError(CdcflowError):
    """An error of the embedded upstream's own parts -- its SQL front (``SqlError``), MVCC store (``MvccError``),
    regions, faults, cluster set-up -- raised inside the process that runs it. Its servers turn each into their
    protocol's error (a MySQL error packet, a gRPC status), so a client sees TiDB's; one that reaches the CLI (a
    cluster that cannot start) is printed as any cdcflow error is."""
