"""Counters and histograms for hot paths, updated without a lock and exported by prometheus_client.

prometheus_client guards every value with a ``threading.Lock`` and checks on each ``inc()`` that the metric
is a labelled child: about half a microsecond per update, four updates per admission review. These metrics
are written only from the event loop's thread and read by ``/metrics``, which that same loop serves
(:mod:`enclave_core.runtime.probes`), so no update can interleave with another or with a scrape, and a plain
attribute add is enough. Each one registers as a custom collector, so it appears on ``/metrics`` like any
other metric: same names, help text, label names and sample layout (``_total``; ``_bucket``/``_sum``/``_count``).

Do not update them from another thread (a gRPC servicer in a thread pool, ``asyncio.to_thread``): use
prometheus_client's own metrics there.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

Child = TypeVar("Child")


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HistogramChild:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        """Observations per bucket, not cumulative; the last one is above every bound (``+Inf``)."""
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # bisect_left: a value equal to a bound is in it (le)
        self.sum += value


class _Family(Collector, Generic[Child]):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry | None):
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], Child] = {}
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> Child:
        """The child for ``values``; keep it rather than looking it up per update."""
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            child = self._children[values] = self._child()
        return child

    @abstractmethod
    def _child(self) -> Child: ...


class LoopCounter(_Family[CounterChild]):
    """A labelled counter (``name`` may end in ``_total``, as prometheus_client's own accepts)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        super().__init__(name.removesuffix("_total"), documentation, labelnames, registry)

    def _child(self) -> CounterChild:
        return CounterChild()

    def describe(self) -> Iterator[Metric]:
        """Lets the registry refuse a second metric of the same name, as it does for its own."""
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            family.add_metric(list(values), child.value)
        yield family


class LoopHistogram(_Family[HistogramChild]):
    """A labelled histogram with fixed upper bounds (``+Inf`` is added)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        bounds = tuple(sorted(float(bound) for bound in buckets if not math.isinf(bound)))
        if not bounds:
            raise ValueError(f"{name} needs at least one finite bucket bound")
        self.bounds = bounds
        super().__init__(name, documentation, labelnames, registry)

    def _child(self) -> HistogramChild:
        return HistogramChild(self.bounds)

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in list(self._children.items()):
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip((*self.bounds, math.inf), child.counts, strict=True):
                cumulative += count
                buckets.append(("+Inf" if math.isinf(bound) else repr(bound), cumulative))
            family.add_metric(list(values), buckets, child.sum)
        yield family
