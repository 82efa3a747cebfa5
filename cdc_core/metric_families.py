"""Metric families made once per Prometheus registry: a class of them (its ``__init__`` takes the registry and
creates its families there) is shared by every object that reports into that registry, since registering a family
twice is an error. :meth:`PerRegistry.for_registry` gives the set of a registry (the default one by default),
creating it the first time; a registry that is dropped drops its set."""

from __future__ import annotations

import weakref
from typing import Any, ClassVar, Self

from prometheus_client import REGISTRY, CollectorRegistry


class PerRegistry:
    """Base of a class of metric families; each subclass keeps its own sets, one per registry."""

    _by_registry: ClassVar[weakref.WeakKeyDictionary[CollectorRegistry, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._by_registry = weakref.WeakKeyDictionary()

    def __init__(self, registry: CollectorRegistry) -> None:
        raise NotImplementedError  # a subclass creates its families in ``registry``

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> Self:
        """This class's families in ``registry`` (default: prometheus_client's), created on the first call."""
        reg = REGISTRY if registry is None else registry
        metrics: Self | None = cls._by_registry.get(reg)
        if metrics is None:
            metrics = cls._by_registry[reg] = cls(reg)
        return metrics
