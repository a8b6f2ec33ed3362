"""Custom quotas against the real control plane: three admission replicas behind one webhook URL, enclave-quotas
counting, every object written through kube-apiserver."""

from __future__ import annotations

import os
from typing import Any

from kubernetes import client

from enclave_core.quantity import Quantity
from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .harness import GROUP, VERSION, QuotaEnclave, ready_reason

BURST_ROUNDS = int(os.environ.get("ENCLAVE_QUOTA_BURST_ROUNDS", "1"))
"""The issue's proof repeats the burst five times (``tox -e quotas-slow``); once in the default suite."""


def configmap(name: str, labels: dict[str, str] | None = None, data: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data or {}}


def count_spec(limit: int, kind: str = "ConfigMap", **source: Any) -> dict[str, Any]:
    return {"limit": limit, "sources": [{"kind": kind, "op": "count", **source}]}


def test_hundred_concurrent_creates_against_a_count_of_ten_admit_exactly_ten(
    enclave: QuotaEnclave, namespace: str
) -> None:
    core = client.CoreV1Api(enclave.wide)
    # every namespace has a kube-root-ca.crt ConfigMap: count only the burst's
    enclave.create_quota(namespace, "ten", count_spec(10, selectors=[{"matchLabels": {"burst": "yes"}}]))
    ledger = enclave.ledger_name(namespace, "ten")
    try:
        for round_ in range(BURST_ROUNDS):
            prefix = f"r{round_}-"

            def create(index: int, prefix: str = prefix) -> Any:
                return core.create_namespaced_config_map(namespace, configmap(f"{prefix}{index}", {"burst": "yes"}))

            admitted = enclave.burst(100, create)
            assert sum(admitted) == 10
            stored = [
                cm
                for cm in core.list_namespaced_config_map(namespace).items
                if cm.metadata.name.startswith(f"r{round_}-")
            ]
            assert len(stored) == 10
            poll(lambda: enclave.used(namespace, "ten") == "10", what="used 10")
            settled = poll(
                lambda: (status := enclave.ledger(ledger).get("status") or {}).get("reserved") == "0" and status,
                what="ledger settled to reserved 0",
            )
            assert settled["allocated"] == "10"
            core.delete_collection_namespaced_config_map(namespace, label_selector="burst=yes")
            poll(
                lambda: enclave.used(namespace, "ten") == "0" and enclave.ledger(ledger)["status"]["allocated"] == "0",
                what="freed",
            )
        served = [port for port, connections in enclave.balancer.connections.items() if connections]
        assert len(served) == 3, "every replica decided part of the burst"
    finally:
        enclave.delete_quota(namespace, "ten")


MI_1536 = Quantity.parse("1536Mi")
MEMORY_PATH = ".spec.containers[*].resources.requests.memory"
MEMORY_CEL = "object.spec.containers.map(c, quantity(c.resources.requests.memory))"


def pod(name: str, *memory: str) -> dict[str, Any]:
    containers = [
        {"name": f"c{i}", "image": "registry.invalid/pause", "resources": {"requests": {"memory": m}}}
        for i, m in enumerate(memory)
    ]
    return {"metadata": {"name": name}, "spec": {"containers": containers}}


def test_memory_requests_summed_through_path_and_through_cel(enclave: QuotaEnclave, namespace: str) -> None:
    core = client.CoreV1Api(enclave.kube)
    poll(lambda: core.read_namespaced_service_account("default", namespace), what="default service account")
    enclave.create_quota(namespace, "by-path", {"limit": "3Gi", "sources": [{"kind": "Pod", "path": MEMORY_PATH}]})
    enclave.create_quota(namespace, "by-cel", {"limit": "3Gi", "sources": [{"kind": "Pod", "cel": MEMORY_CEL}]})
    try:
        core.create_namespaced_pod(namespace, pod("two", "1Gi", "512Mi"))
        for quota in ("by-path", "by-cel"):  # equal amounts (CEL quantities come back in decimal form)
            enclave.wait_status(namespace, quota, lambda s: Quantity.parse(s["usage"]["used"]) == MI_1536)
        enclave.settled(namespace, "by-path")
        enclave.settled(namespace, "by-cel")
        body = refused(lambda: core.create_namespaced_pod(namespace, pod("big", "2Gi")))
        # both refuse; the first in ledger-name order is named (CEL amounts read back in decimal form)
        assert "by-cel exceeded: requested 2147483648, used 1610612736, reserved 0, limit 3Gi" in body
        core.create_namespaced_pod(namespace, pod("fits", "1Gi", "512Mi"))
        status = enclave.wait_status(namespace, "by-path", lambda s: s["usage"]["used"] == "3Gi")
        assert status["usage"]["available"] == "0"
        assert [claim["name"] for claim in status["claims"]] == ["fits", "two"]
        assert status["targets"] == [
            {"group": "", "kind": "Pod", "version": "v1", "path": MEMORY_PATH, "op": "add", "scope": "Namespaced"}
        ]
        enclave.wait_status(namespace, "by-cel", lambda s: Quantity.parse(s["usage"]["used"]) == Quantity.parse("3Gi"))
        unreadable = refused(
            lambda: core.create_namespaced_pod(
                namespace, {**pod("none"), "spec": {"containers": [{"name": "c", "image": "x"}]}}
            )
        )
        assert "cannot count this Pod" in unreadable
    finally:
        enclave.delete_quota(namespace, "by-path")
        enclave.delete_quota(namespace, "by-cel")


def refused(call: Any, *fragments: str) -> str:
    import pytest
    from kubernetes.client.rest import ApiException

    with pytest.raises(ApiException) as caught:
        call()
    body = caught.value.body or ""
    assert "denied the request" in body, body
    for fragment in fragments:
        assert fragment in body, body
    return str(body)


def test_sub_subtracts_and_usage_never_goes_below_zero(enclave: QuotaEnclave, namespace: str) -> None:
    core = client.CoreV1Api(enclave.kube)
    item = {"matchLabels": {"role": "item"}}
    credit = {"matchLabels": {"role": "credit"}}
    spec = {
        "limit": 2,
        "sources": [
            {"kind": "ConfigMap", "op": "count", "selectors": [item]},
            {"kind": "ConfigMap", "op": "sub", "path": ".data.credit", "selectors": [credit]},
        ],
    }
    enclave.create_quota(namespace, "credits", spec)
    try:
        core.create_namespaced_config_map(namespace, configmap("credit-a", {"role": "credit"}, {"credit": "1"}))
        poll(lambda: enclave.used(namespace, "credits") == "0", what="a credit alone counts 0, not -1")
        core.create_namespaced_config_map(namespace, configmap("i1", {"role": "item"}))
        core.create_namespaced_config_map(namespace, configmap("i2", {"role": "item"}))
        poll(lambda: enclave.used(namespace, "credits") == "1", what="two items minus one credit")
        enclave.settled(namespace, "credits")
        core.create_namespaced_config_map(namespace, configmap("i3", {"role": "item"}))
        refused(lambda: core.create_namespaced_config_map(namespace, configmap("i4", {"role": "item"})), "exceeded")
        core.patch_namespaced_config_map("i3", namespace, {"metadata": {"labels": {"role": "retired"}}})
        poll(lambda: enclave.used(namespace, "credits") == "1", what="a relabel out of scope releases its usage")
    finally:
        enclave.delete_quota(namespace, "credits")


def test_every_selector_kind(enclave: QuotaEnclave, namespace: str) -> None:
    core = client.CoreV1Api(enclave.kube)
    has_c = "has(object.data) && 'c' in object.data && object.data.c == 'z'"
    spec = {
        "limit": 0,
        "scopeSelectors": [{"matchExpressions": [{"key": "ignored", "operator": "DoesNotExist"}]}],
        "sources": [
            {"kind": "ConfigMap", "op": "count", "selectors": [{"matchLabels": {"a": "x"}}]},
            {
                "kind": "ConfigMap",
                "op": "count",
                "selectors": [{"matchExpressions": [{"key": "b", "operator": "In", "values": ["y"]}]}],
            },
            {"kind": "ConfigMap", "op": "count", "selectors": [{"fieldSelectors": ["$[?(@.data.f == 'on')]"]}]},
            {"kind": "ConfigMap", "op": "count", "selectors": [{"celExpressions": [has_c]}]},
        ],
    }
    enclave.create_quota(namespace, "selective", spec)
    try:
        counted = [
            configmap("by-labels", {"a": "x"}),
            configmap("by-expressions", {"b": "y"}),
            configmap("by-field", data={"f": "on"}),
            configmap("by-cel", data={"c": "z"}),
        ]
        for obj in counted:
            refused(
                lambda obj=obj: core.create_namespaced_config_map(namespace, obj), "CustomQuota", "selective", "limit 0"
            )
        for obj in (
            configmap("plain"),
            configmap("other-label", {"a": "other"}),
            configmap("field-off", data={"f": "off"}),
            configmap("out-of-scope", {"a": "x", "ignored": "yes"}),
        ):
            core.create_namespaced_config_map(namespace, obj)
    finally:
        enclave.delete_quota(namespace, "selective")


def test_global_quota_follows_namespaces_gaining_and_losing_the_label(enclave: QuotaEnclave, namespace: str) -> None:
    core = client.CoreV1Api(enclave.kube)
    team = f"team-{namespace[-6:]}"
    other = f"{namespace[:50]}-b"
    core.patch_namespace(namespace, {"metadata": {"labels": {"quota-team": team}}})
    core.create_namespace({"metadata": {"name": other}})
    name = f"global-{namespace[-6:]}"
    spec = {
        "limit": 2,
        "namespaceSelectors": [{"matchLabels": {"quota-team": team}}],
        "sources": [{"kind": "ConfigMap", "op": "count", "selectors": [{"matchLabels": {"gq": "yes"}}]}],
    }
    enclave.create_quota(None, name, spec)
    try:
        core.create_namespaced_config_map(namespace, configmap("a1", {"gq": "yes"}))
        core.create_namespaced_config_map(other, configmap("b1", {"gq": "yes"}))  # not selected: free
        core.create_namespaced_config_map(namespace, configmap("a2", {"gq": "yes"}))
        refused(lambda: core.create_namespaced_config_map(namespace, configmap("a3", {"gq": "yes"})), name, "limit 2")
        core.patch_namespace(other, {"metadata": {"labels": {"quota-team": team}}})
        status = enclave.wait_status(None, name, lambda s: s["usage"]["used"] == "3")
        assert status["namespaces"] == sorted([namespace, other])
        assert status["usage"]["available"] == "0"
        core.patch_namespace(namespace, {"metadata": {"labels": {"quota-team": None}}})
        enclave.wait_status(None, name, lambda s: s["usage"]["used"] == "1" and s["namespaces"] == [other])
        enclave.wait_known()
        poll(lambda: enclave.ledger(enclave.ledger_name(None, name))["status"]["allocated"] == "1", what="ledger")
        core.create_namespaced_config_map(other, configmap("b2", {"gq": "yes"}))
    finally:
        enclave.delete_quota(None, name)
        core.delete_namespace(other)


def test_bad_input_is_reported_and_the_last_good_count_kept(enclave: QuotaEnclave, namespace: str) -> None:
    core = client.CoreV1Api(enclave.kube)
    labels = {"sized": "yes"}
    core.create_namespaced_config_map(namespace, configmap("good", labels, {"size": "2"}))
    core.create_namespaced_config_map(namespace, configmap("words", labels, {"size": "lots"}))
    core.create_namespaced_config_map(namespace, configmap("empty", labels))
    source: dict[str, Any] = {"kind": "ConfigMap", "path": ".data.size", "selectors": [{"matchLabels": labels}]}
    enclave.create_quota(namespace, "sizes", {"limit": 10, "sources": [source]})
    try:
        status = enclave.wait_status(namespace, "sizes", lambda s: ready_reason(s) == "UsageUnreadable")
        assert status["usage"]["used"] == "2"
        message = next(c["message"] for c in status["conditions"] if c["type"] == "Ready")
        assert "ConfigMap " + namespace + "/words" in message
        assert "ConfigMap " + namespace + "/empty" in message
        poll(lambda: enclave.events(namespace, "sizes", "UsageUnreadable"), what="UsageUnreadable event")
        # the path changes so that nothing reads: the good object keeps the usage it had
        enclave.custom.patch_namespaced_custom_object(
            "enclave.dev",
            "v1beta2",
            namespace,
            "customquotas",
            "sizes",
            {"spec": {"sources": [{**source, "path": ".data.other"}]}},
        )
        status = enclave.wait_status(namespace, "sizes", lambda s: s.get("observedGeneration") == 2)
        assert status["usage"]["used"] == "2"
    finally:
        enclave.delete_quota(namespace, "sizes")


def test_global_quota_events_go_to_the_configured_events_namespace(enclave: QuotaEnclave, namespace: str) -> None:
    """A GlobalCustomQuota is cluster-scoped: its Events land in ``ServiceConfiguration.spec.events.namespace``
    (they once went to Enclave's own namespace whatever the configuration said)."""
    core = client.CoreV1Api(enclave.kube)
    elsewhere = unique("q-events")
    core.create_namespace({"metadata": {"name": elsewhere}})
    configurations = (GROUP, VERSION, "serviceconfigurations", enclave.config_name)
    enclave.custom.patch_cluster_custom_object(*configurations, {"spec": {"events": {"namespace": elsewhere}}})
    name = unique("gq-events")
    source = {"kind": "Gadget", "apiVersion": f"{elsewhere}.quota-test.dev", "op": "count"}

    def configuration_arrived() -> bool:
        """A probe quota's Event lands in the new namespace: enclave-quotas holds the patched configuration (it
        travels through enclave-config's stream; a quota judged before it arrives reports where Events went
        until then, once, and CI saw that race)."""
        probe = unique("gq-probe")
        enclave.create_quota(None, probe, {"limit": 1, "sources": [source]})
        try:
            found = poll(
                lambda: (
                    ("new" if enclave.events(elsewhere, probe, "SourceNotFound") else "")
                    or ("old" if enclave.events(enclave.namespace, probe, "SourceNotFound") else "")
                ),
                what="the probe quota's SourceNotFound event",
            )
            return bool(found == "new")
        finally:
            enclave.delete_quota(None, probe)

    try:
        poll(configuration_arrived, timeout=90, interval=0.5, what="enclave-quotas taking the events namespace")
        enclave.create_quota(None, name, {"limit": 1, "sources": [source]})
        enclave.wait_status(None, name, lambda s: ready_reason(s) == "SourceNotFound")
        poll(lambda: enclave.events(elsewhere, name, "SourceNotFound"), what=f"SourceNotFound event in {elsewhere}")
        assert not enclave.events(enclave.namespace, name, "SourceNotFound")
    finally:
        enclave.delete_quota(None, name)
        enclave.custom.patch_cluster_custom_object(
            *configurations, {"spec": {"events": {"namespace": enclave.namespace}}}
        )
        core.delete_namespace(elsewhere)


def test_a_kind_served_later_is_counted_once_its_crd_is_installed(enclave: QuotaEnclave, namespace: str) -> None:
    group = f"{namespace[-6:]}.quota-test.dev"
    spec = {"limit": 1, "sources": [{"kind": "Widget", "apiVersion": group, "op": "count"}]}
    enclave.create_quota(namespace, "widgets", spec)
    extensions = client.ApiextensionsV1Api(enclave.kube)
    crd_name = f"widgets.{group}"
    try:
        status = enclave.wait_status(namespace, "widgets", lambda s: ready_reason(s) == "SourceNotFound")
        assert "no Widget is served" in status["conditions"][0]["message"]
        poll(lambda: enclave.events(namespace, "widgets", "SourceNotFound"), what="SourceNotFound event")
        extensions.create_custom_resource_definition(
            {
                "metadata": {"name": crd_name},
                "spec": {
                    "group": group,
                    "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
                    "scope": "Namespaced",
                    "versions": [
                        {
                            "name": "v1",
                            "served": True,
                            "storage": True,
                            "schema": {
                                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                            },
                        }
                    ],
                },
            }
        )
        status = enclave.wait_status(namespace, "widgets", lambda s: ready_reason(s) == "Counted", timeout=60)
        assert status["targets"][0]["group"] == group
        enclave.wait_known()
        poll(lambda: _hook_has(enclave, "widgets"), what="the quota hook sees widgets")
        custom = enclave.custom

        def widget(name: str, dry_run: bool = False) -> Any:
            body = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name}}
            return custom.create_namespaced_custom_object(
                group, "v1", namespace, "widgets", body, dry_run="All" if dry_run else None
            )

        widget("w1")
        # kube-apiserver applies a changed webhook rule a moment after it is written: wait until it refuses
        poll(lambda: _denied(lambda: widget("w2", dry_run=True)), what="widgets enforced")
        refused(lambda: widget("w2"), "widgets", "limit 1")
    finally:
        enclave.delete_quota(namespace, "widgets")
        extensions.delete_custom_resource_definition(crd_name)


def _denied(call: Any) -> bool:
    from kubernetes.client.rest import ApiException

    try:
        call()
    except ApiException as err:
        return "denied the request" in (err.body or "")
    return False


def _hook_has(enclave: QuotaEnclave, resource: str) -> bool:
    configuration = client.AdmissionregistrationV1Api(enclave.kube).read_validating_webhook_configuration(
        f"{enclave.config_name}-validating"
    )
    hook = next(w for w in configuration.webhooks if w.name == "quotas.enclave.dev")
    return any(resource in (rule.resources or []) for rule in hook.rules or [])


def test_killing_the_controller_and_a_replica_mid_burst_over_admits_nothing(
    enclave: QuotaEnclave, namespace: str
) -> None:
    import threading

    core = client.CoreV1Api(enclave.wide)
    labels = {"crash": "yes"}
    enclave.create_quota(namespace, "crash", count_spec(10, selectors=[{"matchLabels": labels}]))
    victim = enclave.admissions[-1]
    results: list[bool] = []

    def run() -> None:
        results.extend(
            enclave.burst(
                60, lambda i: core.create_namespaced_config_map(namespace, configmap(f"c{i}", labels)), workers=30
            )
        )

    burst = threading.Thread(target=run)
    burst.start()
    poll(
        lambda: len(core.list_namespaced_config_map(namespace, label_selector="crash=yes").items) >= 3,
        what="first admissions",
    )
    enclave.quotas.process.popen.kill()  # type: ignore[union-attr]
    victim.process.popen.kill()  # type: ignore[union-attr]
    burst.join(120)
    stored = len(core.list_namespaced_config_map(namespace, label_selector="crash=yes").items)
    assert stored <= 10, "over-admitted while the controller and a replica died"
    enclave.restart_quotas()
    enclave.admissions.remove(victim)
    enclave.wait_known()
    ledger = enclave.ledger_name(namespace, "crash")
    settled = poll(
        lambda: (s := enclave.ledger(ledger).get("status") or {}).get("reserved") == "0" and s,
        timeout=60,
        what="settled",
    )
    assert settled["allocated"] == str(stored)
    # nothing lost: the quota still admits exactly up to its limit
    extra = enclave.burst(20, lambda i: core.create_namespaced_config_map(namespace, configmap(f"after-{i}", labels)))
    assert sum(extra) == 10 - stored
