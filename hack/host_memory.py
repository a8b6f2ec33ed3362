"""By hand (issue 33): the co-located host's memory at scale, and what its shared caches hold.

``python hack/host_memory.py run WORKDIR``: a control plane in WORKDIR, enclave-host with all six controllers and
one admission replica (``start_tenancy(colocated=True)``), ``T`` (1,000) tenants created by the administrator, then
``N`` (10) namespaces per tenant created by its owner through admission (16 owners at once); once every tenant
reports them (``status.size``), each process's settled RSS (two samples 2 s apart within 1 MB) and peak (VmHWM).
The plane is kept until ``WORKDIR-release`` exists (at most 30 min), for ``caches`` to read it.

``python hack/host_memory.py caches KUBECONFIG before|own|shared``: in a fresh interpreter under tracemalloc, the
namespace, Tenant and RuleStatus caches the hosted controllers keep, filled from that plane one after the other,
with what each adds: ``before`` as main held them at b6bfc72 (one informer per component, the four others'
namespaces trimmed of managedFields only), ``own`` with this tree's projections but one informer per component
(a process per component), ``shared`` through one hub (the host).
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

MB = 2**20


def run(root: Path) -> None:
    from kubernetes import client

    from enclave_testing.clients import create_namespace_retrying
    from enclave_testing.controlplane import ControlPlane
    from enclave_testing.crds import install_crds
    from enclave_testing.procstat import peak_rss_bytes, rss_bytes, settled_rss
    from enclave_testing.stack import start_tenancy
    from enclave_testing.waiting import poll

    tenants, namespaces, users = int(os.environ.get("T", "1000")), int(os.environ.get("N", "10")), "host-memory"
    shutil.rmtree(root, ignore_errors=True)
    plane = ControlPlane(root).start()
    began = time.monotonic()

    def say(*parts: Any) -> None:
        print(f"[{time.monotonic() - began:6.0f}s]", *parts, flush=True)

    try:
        install_crds(plane.admin_client())
        stack = start_tenancy(
            plane,
            [{"kind": "Group", "name": users}],
            colocated=True,
            pools=True,
            quotas=True,
            globalquotas=True,
            replication=True,
        )
        found: dict[int, list[str]] = {}
        for running in stack.processes:
            assert running.process.popen is not None
            found.setdefault(running.process.popen.pid, []).append(running.spec.name)
        pids = {("enclave-host" if len(names) > 1 else names[0]): pid for pid, names in found.items()}

        def rss() -> dict[str, int]:
            return {label: round(rss_bytes(pid) / MB) for label, pid in pids.items()}

        settled = settled_rss(list(pids.values()))
        say("idle settled", {label: round(settled[pid] / MB) for label, pid in pids.items()})
        names = [f"h-{index:04d}" for index in range(tenants)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda name: stack.tenant(name, [{"kind": "User", "name": f"owner-{name}"}]), names))
        say("tenants created", rss())

        def populate(name: str) -> None:
            api = client.CoreV1Api(plane.impersonate(f"owner-{name}", [users]))
            for index in range(namespaces):
                create_namespace_retrying(api, f"{name}-{index}", 300)

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(populate, names))
        say("namespaces created", rss())
        custom = client.CustomObjectsApi(plane.admin_client())

        def reported() -> bool:
            items = custom.list_cluster_custom_object("enclave.dev", "v1beta2", "tenants")["items"]
            sizes = {item["metadata"]["name"]: (item.get("status") or {}).get("size") for item in items}
            return all(sizes.get(name) == namespaces for name in names)

        poll(reported, timeout=3600, interval=5.0, what="every namespace reported")
        say("reported", rss())
        settled = settled_rss(list(pids.values()), timeout=600)
        say(
            "settled",
            {label: round(settled[pid] / MB) for label, pid in pids.items()},
            "peak",
            {label: round(peak_rss_bytes(pid) / MB) for label, pid in pids.items()},
        )
        release = root.parent / f"{root.name}-release"
        deadline = time.monotonic() + 1800
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(5)
        stack.stop()
    finally:
        plane.stop()


def caches(kubeconfig: str, mode: str) -> None:
    from enclave_core import GROUP_VERSION
    from enclave_core.kube import projections, shared
    from enclave_core.kube.connection import connect
    from enclave_core.kube.informer import keep_managed_fields
    from enclave_core.kube.rest import Kube
    from enclave_core.runtime.memory import release, resident_bytes

    namespaces, tenants_path = "/api/v1/namespaces", f"/apis/{GROUP_VERSION}/tenants"
    statuses = f"/apis/{GROUP_VERSION}/rulestatuses"
    old = keep_managed_fields()
    before = {namespaces: old, tenants_path: old, statuses: old}
    ours = {namespaces: projections.namespace, tenants_path: projections.tenant, statuses: projections.rule_status}
    wanted = [
        ("tenants", namespaces),
        ("tenants", tenants_path),
        ("tenants", statuses),
        ("globalquotas", namespaces),
        ("globalquotas", tenants_path),
        ("globalquotas", statuses),
        ("pools", namespaces),
        ("quotas", namespaces),
        ("replication", namespaces),
        ("replication", tenants_path),
    ]

    def transform(component: str, path: str) -> Any:
        if mode == "before" and component != "tenants":
            return before[path]
        if mode == "before" and path == tenants_path:
            return old
        return ours[path]

    async def main() -> None:
        kubes: dict[str, Kube] = {}
        if mode == "shared":
            shared.install(shared.SharedInformers(lambda: connect(kubeconfig)).start())
        gc.collect()
        release()
        rss, (traced, _) = resident_bytes(), tracemalloc.get_traced_memory()
        tasks = []
        for component, path in wanted:
            kube = kubes.setdefault(component, Kube(connect(kubeconfig), field_manager=f"measure-{component}"))
            kind = path.rsplit("/", 1)[1]
            informer = shared.informer(kube, path, name=kind, transform=transform(component, path))
            tasks.append(asyncio.create_task(informer.run()))
            await informer.synced.wait()
            gc.collect()
            now, _ = tracemalloc.get_traced_memory()
            print(f"{mode} {component:13s} {kind:13s} {len(informer.items):6d} objects +{(now - traced) / MB:5.1f} MB")
            traced = now
        gc.collect()
        release()
        total = tracemalloc.get_traced_memory()[0] / MB
        print(f"{mode} total: {total:.1f} MB traced, RSS +{(resident_bytes() - rss) / MB:.1f} MB", flush=True)
        os._exit(0)  # the informers' tasks and the hub's thread need no orderly end here

    tracemalloc.start()
    asyncio.run(main())


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        run(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["caches"]:
        caches(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
