"""What a component process costs, read from outside it: CPU seconds and resident memory from /proc, and its
own API request counters from /metrics. Benchmarks and the scale suite report these per component."""

from __future__ import annotations

import os
import time
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` so far (``utime + stime`` of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        # The command name (field 2) may hold spaces; every field after its closing parenthesis is plain.
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` now (second field of /proc/<pid>/statm)."""
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def peak_rss_bytes(pid: int) -> int:
    """The most ``pid`` has held resident since it started (``VmHWM`` of /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def settled_rss(pids: list[int], timeout: float = 180.0) -> dict[int, int]:
    """Each process's RSS once two samples 2 s apart differ by under 1 MB for every one of them: what "idle"
    means for a memory row (a process still digesting what it was just shown would be caught mid-growth)."""
    last: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    while True:
        now = {pid: rss_bytes(pid) for pid in pids}
        if last and all(abs(now[pid] - last[pid]) < 2**20 for pid in pids):
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"RSS still moving after {timeout:.0f} s: {now}")
        last = now
        time.sleep(2.0)


@dataclass(frozen=True)
class Requests:
    """A component's ``enclave_kube_requests_total`` at one moment."""

    reads: float
    """GETs (list and get)."""
    writes: float
    """POST, PUT, PATCH, DELETE: Lease renewals and Events left out (the runtime's, not the work's)."""
    renewals: float
    """Lease requests: the cost of holding leadership, constant whatever the load."""
    by_kind: dict[str, float] = field(default_factory=dict)
    """Every request but watches, by ``METHOD resource``: what a nonzero row is made of."""

    def __sub__(self, other: Requests) -> Requests:
        moved = {
            key: value - other.by_kind.get(key, 0.0)
            for key, value in self.by_kind.items()
            if value != other.by_kind.get(key, 0.0)
        }
        return Requests(self.reads - other.reads, self.writes - other.writes, self.renewals - other.renewals, moved)


def requests(probe_url: str) -> Requests:
    """The component's API requests so far, from its /metrics (``probe_url`` like ``http://127.0.0.1:<port>``)."""
    with urllib.request.urlopen(f"{probe_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    reads = writes = renewals = 0.0
    by_kind: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name != "enclave_kube_requests_total":
                continue
            method, resource = sample.labels["method"], sample.labels["resource"]
            if method != "WATCH":
                by_kind[f"{method} {resource}"] = sample.value
            if resource == "leases":
                renewals += sample.value
            elif method == "GET":
                reads += sample.value
            elif method not in ("WATCH",) and resource != "events":
                writes += sample.value
    return Requests(reads, writes, renewals, by_kind)
