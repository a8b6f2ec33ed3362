"""Lock-free hot-path metrics expose exactly what prometheus_client's own would."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from enclave_core.runtime.loopmetrics import LoopCounter, LoopHistogram

BUCKETS = (0.001, 0.005, 0.01)


def _lines(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


def test_counter_exposition_matches_prometheus_client() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = LoopCounter("demo_requests_total", "Requests", ["path", "result"], registry=ours)
    reference = Counter("demo_requests_total", "Requests", ["path", "result"], registry=theirs)
    for metric in (mine, reference):
        metric.labels("/a", "allowed").inc()
        metric.labels("/a", "allowed").inc(2)
        metric.labels("/b", "denied").inc()
    assert _lines(ours) == _lines(theirs)
    assert ours.get_sample_value("demo_requests_total", {"path": "/a", "result": "allowed"}) == 3.0


def test_histogram_exposition_matches_prometheus_client() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = LoopHistogram("demo_seconds", "Latency", ["path"], buckets=BUCKETS, registry=ours)
    reference = Histogram("demo_seconds", "Latency", ["path"], buckets=BUCKETS, registry=theirs)
    # on a bound, between bounds, below all, above all: each lands where Prometheus' "le" says
    for value in (0.001, 0.0049, 0.0001, 0.5, 0.01):
        mine.labels("/a").observe(value)
        reference.labels("/a").observe(value)
    assert _lines(ours) == _lines(theirs)
    assert ours.get_sample_value("demo_seconds_bucket", {"path": "/a", "le": "0.005"}) == 3.0
    assert ours.get_sample_value("demo_seconds_count", {"path": "/a"}) == 5.0


def test_a_family_is_listed_before_any_update_and_names_are_unique() -> None:
    registry = CollectorRegistry()
    LoopCounter("demo_total", "Demo", ["path"], registry=registry)
    assert "# TYPE demo_total counter" in generate_latest(registry).decode()
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Counter("demo_total", "Again", ["path"], registry=registry)


def test_wrong_label_count_is_refused() -> None:
    counter = LoopCounter("demo_total", "Demo", ["path", "result"], registry=None)
    with pytest.raises(ValueError, match="takes labels"):
        counter.labels("/a")
