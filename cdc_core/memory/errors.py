"""Errors raised by the memory primitives (:mod:`cdc_core.memory`).

Every error derives from :class:`MemoryLimitError` (itself a :class:`~cdc_core.errors.CdcflowError`), so a
caller that only wants "the limiter said no" catches one type. The request errors also derive from
:class:`ValueError` because they are programming errors of the caller, not load conditions.
"""

from __future__ import annotations

from cdc_core.errors import CdcflowError


class MemoryLimitError(CdcflowError):
    """Base class of every error raised by :class:`~cdc_core.memory.AsyncSemaphore` and the limiters."""


class QueueFull(MemoryLimitError):
    """The request did not fit and the wait queue already holds ``max_queue`` requests.

    Raised at once, before the request is queued; for an update the old permit stays valid.
    """


class AcquireTimeout(MemoryLimitError):
    """The request waited in the queue longer than its timeout.

    The request has left the queue (requests behind it were reprocessed); for an update the old permit
    stays valid. Deliberately *not* a :class:`TimeoutError`, so it cannot be confused with a caller's
    own ``asyncio.timeout``.
    """


class SemaphoreClosed(MemoryLimitError):
    """The semaphore was closed: pending waiters fail with this and later requests fail at once."""


class InvalidPermitRequest(MemoryLimitError, ValueError):
    """The request can never be served: negative, or larger than the limit. Rejected at once, never capped."""


class InvalidPermit(MemoryLimitError, ValueError):
    """The permit cannot be updated: released, replaced, already being updated, or from another semaphore."""


class PermitReleased(InvalidPermit):
    """The permit was released while its update was pending; the update is void and created no permits."""
