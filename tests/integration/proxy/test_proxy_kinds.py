"""kubectl through enclave-proxy as a tenant owner, for each cluster-scoped kind the proxy filters beyond
namespaces and nodes: StorageClasses, IngressClasses, PriorityClasses, RuntimeClasses, GatewayClasses and
PersistentVolumes, chosen by the tenant's ``spec.proxy``, the ServiceConfiguration's default, its rules (priority
classes) or the ownership label (volumes). kubectl prints the Table the proxy renders, gets one object, and
watches objects enter and leave the visible set.

The suite's proxy starts with the conftest's ClusterRole (namespaces and nodes); this module adds the reads of
the other kinds (:data:`enclave_testing.proxy.FILTERED_KIND_RULES`, which the chart grants too), and the proxy's
informers list them once they may.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.names import unique
from enclave_testing.proxy import FILTERED_KIND_RULES, subject, volume
from enclave_testing.rbac import granted
from enclave_testing.waiting import poll

from .conftest import Caller, ProxyStack

GROUP, VERSION = "enclave.dev", "v1beta2"


@pytest.fixture(scope="module", autouse=True)
def proxy_reads_every_filtered_kind(proxied: ProxyStack, gateway_api_crds: list[str]) -> Iterator[None]:
    identity = next(arg.split("=", 1)[1] for arg in proxied.proxy.process.args if arg.startswith("--identity="))
    with granted(proxied.kube, FILTERED_KIND_RULES, [subject(identity)]):
        yield


@pytest.fixture
def made(proxied: ProxyStack) -> Iterator[Callable[[str, str, dict[str, Any]], str]]:
    """Create a cluster-scoped object as the administrator (``group``, ``plural``, body); deleted afterwards."""
    custom, core = client.CustomObjectsApi(proxied.kube), client.CoreV1Api(proxied.kube)
    created: list[tuple[str, str, str, str]] = []

    def make(api_version: str, plural: str, body: dict[str, Any]) -> str:
        group, _, version = api_version.rpartition("/")
        name = str(body["metadata"]["name"])
        if group:  # the custom-objects client speaks to any /apis group
            custom.create_cluster_custom_object(group, version, plural, body)
        else:
            core.create_persistent_volume(body)
        created.append((group, version, plural, name))
        return name

    yield make
    for group, version, plural, name in created:
        with contextlib.suppress(ApiException):
            if group:
                custom.delete_cluster_custom_object(group, version, plural, name)
            else:
                core.delete_persistent_volume(name)


def names(proxied: ProxyStack, caller: Caller, resource: str, *args: str) -> set[str]:
    out = proxied.kubectl(caller.kubeconfig, "get", resource, "-o", "name", *args).stdout
    return {line.rpartition("/")[2] for line in out.split()}


def header(proxied: ProxyStack, caller: Caller, resource: str) -> list[str]:
    return proxied.kubectl(caller.kubeconfig, "get", resource).stdout.splitlines()[0].split()


def set_proxy(proxied: ProxyStack, tenant: str, kinds: list[dict[str, Any]]) -> None:
    client.CustomObjectsApi(proxied.kube).patch_cluster_custom_object(
        GROUP, VERSION, "tenants", tenant, {"spec": {"proxy": {"kinds": kinds}}}
    )


def shown_exactly(proxied: ProxyStack, caller: Caller, resource: str, expected: set[str]) -> None:
    poll(
        lambda: names(proxied, caller, resource) == expected,
        timeout=30,
        what=f"{resource} {sorted(expected)} through the proxy",
    )


def forbidden(proxied: ProxyStack, caller: Caller, *args: str) -> bool:
    done = proxied.kubectl(caller.kubeconfig, "get", *args, check=False)
    return done.returncode != 0 and "Forbidden" in done.stderr


def test_kubectl_get_storageclasses_shows_the_classes_the_tenant_is_given(
    proxied: ProxyStack, caller: Callable[[str], Caller], made: Callable[[str, str, dict[str, Any]], str]
) -> None:
    owner = caller("owner-sc")
    gold, other = unique("gold"), unique("other")
    for name in (gold, other):
        made("storage.k8s.io/v1", "storageclasses", {"metadata": {"name": name}, "provisioner": "example.com/x"})
    proxied.tenant_of(owner, 0, proxy={"kinds": [{"kind": "StorageClasses", "names": [{"exact": [gold]}]}]})
    shown_exactly(proxied, owner, "storageclasses", {gold})
    assert header(proxied, owner, "storageclasses") == [
        "NAME",
        "PROVISIONER",
        "RECLAIMPOLICY",
        "VOLUMEBINDINGMODE",
        "ALLOWVOLUMEEXPANSION",
        "AGE",
    ]
    assert proxied.kubectl_json(owner.kubeconfig, "get", "storageclass", gold)["provisioner"] == "example.com/x"
    assert forbidden(proxied, owner, "storageclass", other), "a class it is not given: kube-apiserver's 403"
    assert names(proxied, owner, "storageclasses", "--field-selector", f"metadata.name={other}") == set()


def test_kubectl_get_ingressclasses_selects_by_label(
    proxied: ProxyStack, caller: Callable[[str], Caller], made: Callable[[str, str, dict[str, Any]], str]
) -> None:
    owner = caller("owner-ic")
    shared, private = unique("shared"), unique("private")
    label = unique("tier")
    for name, tier in ((shared, "shared"), (private, "private")):
        body = {"metadata": {"name": name, "labels": {label: tier}}, "spec": {"controller": "example.com/ingress"}}
        made("networking.k8s.io/v1", "ingressclasses", body)
    selector = {"matchLabels": {label: "shared"}}
    proxied.tenant_of(owner, 0, proxy={"kinds": [{"kind": "IngressClasses", "selector": selector}]})
    shown_exactly(proxied, owner, "ingressclasses", {shared})
    assert header(proxied, owner, "ingressclasses") == ["NAME", "CONTROLLER", "PARAMETERS", "AGE"]
    assert names(proxied, owner, "ingressclasses", "-l", f"{label}=private") == set()


def test_kubectl_get_priorityclasses_shows_what_the_tenants_rules_allow(
    proxied: ProxyStack, caller: Callable[[str], Caller], made: Callable[[str, str, dict[str, Any]], str]
) -> None:
    owner = caller("owner-pc")
    allowed, other = unique("allowed"), unique("other")
    for name in (allowed, other):
        made("scheduling.k8s.io/v1", "priorityclasses", {"metadata": {"name": name}, "value": 1000})
    placement = {"priorityClasses": [{"exact": [allowed]}]}
    rule = {"enforce": {"action": "allow", "workloads": {"placement": placement}}}
    proxied.tenant_of(owner, 0, rules=[rule])
    shown_exactly(proxied, owner, "priorityclasses", {allowed})
    assert header(proxied, owner, "priorityclasses") == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]


def test_kubectl_get_runtimeclasses_follows_the_configurations_default(
    proxied: ProxyStack, caller: Callable[[str], Caller], made: Callable[[str, str, dict[str, Any]], str]
) -> None:
    owner = caller("owner-rc")
    prefix = unique("rc")
    for name in (f"{prefix}-a", f"{prefix}-b", unique("other")):
        made("node.k8s.io/v1", "runtimeclasses", {"metadata": {"name": name}, "handler": "runc"})
    custom = client.CustomObjectsApi(proxied.kube)
    default = {"kinds": [{"kind": "RuntimeClasses", "names": [{"exp": f"^{prefix}-.*$"}]}]}
    config = proxied.stack.config_name
    custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config, {"spec": {"proxy": default}})
    try:
        tenant, _ = proxied.tenant_of(owner, 0)
        shown_exactly(proxied, owner, "runtimeclasses", {f"{prefix}-a", f"{prefix}-b"})
        assert header(proxied, owner, "runtimeclasses") == ["NAME", "HANDLER", "AGE"]
        set_proxy(proxied, tenant, [{"kind": "RuntimeClasses", "names": [{"exact": [f"{prefix}-b"]}]}])
        shown_exactly(proxied, owner, "runtimeclasses", {f"{prefix}-b"})  # the tenant's entry replaces the default
    finally:
        custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", config, {"spec": {"proxy": None}})


def test_kubectl_get_gatewayclasses_shows_the_named_classes(
    proxied: ProxyStack, caller: Callable[[str], Caller], made: Callable[[str, str, dict[str, Any]], str]
) -> None:
    owner = caller("owner-gc")
    mine, other = unique("gw"), unique("other")
    for name in (mine, other):
        body = {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": name},
            "spec": {"controllerName": "example.com/gateway"},
        }
        made("gateway.networking.k8s.io/v1", "gatewayclasses", body)
    proxied.tenant_of(owner, 0, proxy={"kinds": [{"kind": "GatewayClasses", "names": [{"exact": [mine]}]}]})
    shown_exactly(proxied, owner, "gatewayclasses", {mine})
    assert header(proxied, owner, "gatewayclasses") == ["NAME", "CONTROLLER", "ACCEPTED", "AGE"]
    assert forbidden(proxied, owner, "gatewayclass", other)


def test_kubectl_get_persistentvolumes_shows_the_tenants_volumes(
    proxied: ProxyStack, caller: Callable[[str], Caller], made: Callable[[str, str, dict[str, Any]], str]
) -> None:
    owner = caller("owner-pv")
    tenant, namespaces = proxied.tenant_of(owner, 1)
    labelled = made("v1", "persistentvolumes", volume(unique("labelled"), {"enclave.dev/tenant": tenant}))
    bound = made("v1", "persistentvolumes", volume(unique("bound"), {}, namespaces[0]))
    made("v1", "persistentvolumes", volume(unique("loose"), {}))
    made("v1", "persistentvolumes", volume(unique("theirs"), {"enclave.dev/tenant": "someone-else"}))
    shown_exactly(proxied, owner, "persistentvolumes", {labelled})
    assert header(proxied, owner, "persistentvolumes")[:3] == ["NAME", "CAPACITY", "ACCESS"]
    set_proxy(proxied, tenant, [{"kind": "PersistentVolumes", "claimed": True}])
    shown_exactly(proxied, owner, "persistentvolumes", {labelled, bound})


def test_kubectl_watch_sees_a_class_enter_and_leave_the_tenants_view(
    proxied: ProxyStack, caller: Callable[[str], Caller], made: Callable[[str, str, dict[str, Any]], str]
) -> None:
    owner = caller("owner-sc-watch")
    first, later = unique("first"), unique("later")
    for name in (first, later):
        made("storage.k8s.io/v1", "storageclasses", {"metadata": {"name": name}, "provisioner": "example.com/x"})
    tenant, _ = proxied.tenant_of(
        owner, 0, proxy={"kinds": [{"kind": "StorageClasses", "names": [{"exact": [first]}]}]}
    )
    shown_exactly(proxied, owner, "storageclasses", {first})
    # kubectl lists, then watches from the list's resourceVersion: what changes after arrives as events, printed
    # from the Table rows the proxy renders (EVENT, then the kind's columns)
    command = ["get", "storageclasses", "-w", "--output-watch-events"]
    watch = subprocess.Popen(
        [str(proxied.kubectl_path), f"--kubeconfig={owner.kubeconfig}", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert watch.stdout is not None
        for line in watch.stdout:
            lines.put(line.strip())

    threading.Thread(target=read, daemon=True).start()
    seen: list[tuple[str, str]] = []

    def saw(event: str, name: str) -> Callable[[], bool]:
        def check() -> bool:
            while not lines.empty():
                parts = lines.get_nowait().split()
                if len(parts) > 1 and parts[0] != "EVENT":
                    seen.append((parts[0], parts[1]))
            return (event, name) in seen

        return check

    try:
        poll(saw("ADDED", first), timeout=30, what="the listed class on the watch")
        set_proxy(proxied, tenant, [{"kind": "StorageClasses", "names": [{"exact": [later]}]}])
        poll(saw("ADDED", later), timeout=30, what="the class that entered the tenant's view")
        poll(saw("DELETED", first), timeout=30, what="the class that left it")
        assert {name for _, name in seen} <= {first, later}
    finally:
        watch.terminate()
        watch.wait(10)
