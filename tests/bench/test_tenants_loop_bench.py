"""enclave-tenants' write loop at the issue's size, CPU and memory, without a control plane.

Run on demand: ``tox -e bench -- tests/bench/test_tenants_loop_bench.py`` (about a minute at 1,000 x 10). The
controller runs against :class:`enclave_testing.memorykube.MemoryKube` (answers in microseconds, every write
played back into the caches as its watch event), so what is measured is the controller's own work: CPU seconds
(``time.process_time``, independent of the host's load; the in-memory API's own work included) per namespace
for ``TENANTS`` x ``NAMESPACES`` new namespaces (as admission leaves them: labelled, owner reference set)
arriving ``CHUNK`` at a time, the loop settling after each chunk as it would between watch events; a round at rest, a
Lease gained with one new namespace, and an owner change over a tenant of ``OWNER_NAMESPACES`` namespaces; and
the process's resident memory. Times are printed; asserted is what does not depend on the host: a round at rest
writes nothing, and the round that gains the Lease binds the new namespace.

Sizes: ``ENCLAVE_BENCH_TENANTS`` (1000), ``ENCLAVE_BENCH_NAMESPACES`` (10), ``ENCLAVE_BENCH_OWNER_NAMESPACES``
(1000), ``ENCLAVE_BENCH_BATCH`` (the controller's default), ``ENCLAVE_BENCH_CHUNK`` (200; the size for one burst);
outside ``tox -e bench`` the defaults are a smoke size (:mod:`sizes`).
"""

from __future__ import annotations

import copy
import gc
import os
import time
from typing import Any

from sizes import sized

from enclave_core import GROUP_VERSION
from enclave_core.api.names import TENANT_LABEL
from enclave_core.kube.events import EventRecorder
from enclave_core.snapshots.hub import SnapshotHub
from enclave_tenants.__main__ import TENANTS_GC_THRESHOLDS
from enclave_tenants.caches import TENANTS_PATH
from enclave_tenants.controller import Settings, TenantsController
from enclave_testing.memorykube import Echo, MemoryKube

TENANTS = int(os.environ.get("ENCLAVE_BENCH_TENANTS", sized("1000", "10")))
NAMESPACES = int(os.environ.get("ENCLAVE_BENCH_NAMESPACES", sized("10", "2")))
OWNER_NAMESPACES = int(os.environ.get("ENCLAVE_BENCH_OWNER_NAMESPACES", sized("1000", "20")))
BATCH = int(os.environ.get("ENCLAVE_BENCH_BATCH", str(Settings.batch_size)))
CHUNK = int(os.environ.get("ENCLAVE_BENCH_CHUNK", sized("200", "10")))
JSON = dict[str, Any]


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Harness:
    def __init__(self) -> None:
        self.kube = MemoryKube()
        settings = Settings(batch_size=BATCH, resync_seconds=3600)
        self.controller = c = TenantsController(
            self.kube, settings, SnapshotHub("bench"), EventRecorder(self.kube, "bench")
        )
        c.leading = True
        self.echo = Echo(
            self.kube,
            {
                "namespaces": c.namespaces,
                "rolebindings": c.bindings,
                "rulestatuses": c.rule_statuses,
                "tenants": c.tenants,
            },
        )
        self.rss_peak = 0.0

    def tenant(self, name: str, owner: str) -> JSON:
        obj = {
            "apiVersion": GROUP_VERSION,
            "kind": "Tenant",
            "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1},
            "spec": {"owners": [{"kind": "User", "name": owner}]},
        }
        self.kube.objects[f"{TENANTS_PATH}/{name}"] = copy.deepcopy(obj)
        self.echo.put(self.controller.tenants, obj)
        return obj

    def namespace(self, name: str, tenant: str) -> None:
        """As admission leaves a namespace an owner created: tenant label and owner reference."""
        obj = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "creationTimestamp": "2026-11-23T00:00:00Z",
                "labels": {"kubernetes.io/metadata.name": name, TENANT_LABEL: tenant},
                "ownerReferences": [
                    {
                        "apiVersion": GROUP_VERSION,
                        "kind": "Tenant",
                        "name": tenant,
                        "uid": f"uid-{tenant}",
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        self.kube.objects[f"/api/v1/namespaces/{name}"] = copy.deepcopy(obj)
        self.echo.put(self.controller.namespaces, obj)

    async def settle(self) -> tuple[int, int, float]:
        """Rounds until one writes nothing and leaves nothing: (rounds, writes, CPU seconds)."""
        rounds = writes = 0
        started = time.process_time()
        while True:
            more = (await self.controller.reconcile()).requeue_after == 0
            done = self.echo()
            rounds, writes = rounds + 1, writes + len(done)
            self.rss_peak = max(self.rss_peak, _rss_mb())
            if not more and not done:
                return rounds, writes, time.process_time() - started


async def test_tenants_write_loop_cpu_and_memory() -> None:
    gc.set_threshold(*(int(v) for v in TENANTS_GC_THRESHOLDS.split(",")))  # as the process runs
    rows: list[tuple[str, str]] = []

    def row(what: str, value: str) -> None:
        rows.append((what, value))
        print(f"| {what} | {value} |", flush=True)

    baseline = _rss_mb()
    h = Harness()
    for t in range(TENANTS):
        h.tenant(f"t{t:04d}", "alice")
    total = TENANTS * NAMESPACES
    row("size", f"{TENANTS} tenants x {NAMESPACES} namespaces = {total:,}, batch {BATCH}, arriving {CHUNK} at a time")
    rounds = writes = 0
    cpu = 0.0
    for index in range(total):
        t, n = divmod(index, NAMESPACES)
        h.namespace(f"t{t:04d}-n{n:02d}", f"t{t:04d}")
        if (index + 1) % CHUNK == 0 or index + 1 == total:
            done = await h.settle()
            rounds, writes, cpu = rounds + done[0], writes + done[1], cpu + done[2]
    row("new namespaces: rounds, writes", f"{rounds}, {writes:,}")
    row("new namespaces: CPU s in all / ms per namespace", f"{cpu:.1f} / {cpu / total * 1000:.2f}")
    row(
        "RSS before the controller / peak / after the namespaces (MB)",
        f"{baseline:.0f} / {h.rss_peak:.0f} / {_rss_mb():.0f}",
    )
    started = time.process_time()
    more = (await h.controller.reconcile()).requeue_after == 0
    at_rest = len(h.echo())
    row("at rest: one round's writes, CPU s", f"{at_rest} (work left: {more}), {time.process_time() - started:.3f}")
    h.controller.set_leading(True)
    h.namespace("t0007-new", "t0007")
    started = time.process_time()
    await h.controller.reconcile()
    first = h.echo()
    bound = any("/namespaces/t0007-new/rolebindings/" in path for _, path in first)
    row(
        "Lease gained + 1 new namespace: first round binds it, its CPU s",
        f"{bound}, {time.process_time() - started:.2f}",
    )
    rounds, writes, cpu = await h.settle()
    row("... then the rest of the look at everything: rounds, writes, CPU s", f"{rounds}, {writes}, {cpu:.2f}")
    big = h.tenant("big", "alice")
    for n in range(OWNER_NAMESPACES):
        h.namespace(f"big-n{n:04d}", "big")
    await h.settle()
    changed = copy.deepcopy(big)
    changed["metadata"]["generation"] = 2
    changed["spec"]["owners"] = [{"kind": "User", "name": "bob"}]
    h.kube.objects[f"{TENANTS_PATH}/big"] = copy.deepcopy(changed)
    h.echo.put(h.controller.tenants, changed)
    rounds, writes, cpu = await h.settle()
    row(f"owner change over {OWNER_NAMESPACES} namespaces: rounds, writes, CPU s", f"{rounds}, {writes:,}, {cpu:.2f}")
    row("RSS at the end (MB)", f"{_rss_mb():.0f}")
    assert at_rest == 0, f"a round at rest wrote {at_rest} objects"
    assert bound, "the round that gained the Lease did not bind the new namespace"
