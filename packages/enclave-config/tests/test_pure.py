"""Fast tests of the configuration component's pure parts: effective config, rendering, TLS planning."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from enclave_config import rbac, tls, webhooks
from enclave_core.api.configuration import ServiceConfigurationSpec
from enclave_core.api.meta import Entity
from enclave_core.api.validation import service_configuration_problems as problems
from enclave_core.snapshots.configuration import effective, effective_users


def spec(**fields: object) -> ServiceConfigurationSpec:
    return ServiceConfigurationSpec.model_validate(fields)


def test_default_users_is_the_enclave_group() -> None:
    assert effective_users(spec()) == [Entity(kind="Group", name="enclave.dev")]


def test_deprecated_fields_convert_and_deduplicate() -> None:
    users = effective_users(
        spec(users=[{"kind": "Group", "name": "a"}], userGroups=["a", "b"], userNames=["alice", "alice"])
    )
    assert [(u.kind, u.name) for u in users] == [("Group", "a"), ("Group", "b"), ("User", "alice")]


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"protectedNamespaceRegex": "(["}, "spec.protectedNamespaceRegex"),
        ({"nodeMetadata": {"forbiddenLabels": {"deniedRegex": "*x"}}}, "spec.nodeMetadata.forbiddenLabels.deniedRegex"),
        (
            {"nodeMetadata": {"forbiddenAnnotations": {"deniedRegex": "a)"}}},
            "spec.nodeMetadata.forbiddenAnnotations.deniedRegex",
        ),
        ({"cacheInvalidation": "0"}, "spec.cacheInvalidation"),
    ],
)
def test_problems_name_the_field(fields: dict[str, object], where: str) -> None:
    found = problems(spec(**fields))
    assert [p.field for p in found] == [where]


def _hook(**extra: object) -> dict[str, object]:
    return {
        "name": "all.enclave.dev",
        "path": "/all",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}],
        **extra,
    }


def test_fail_closed_webhook_on_everything_must_spare_kube_system() -> None:
    admission = {"validating": {"client": {"url": "https://x.example.com"}, "webhooks": [_hook()]}}
    assert [p.field for p in problems(spec(admission=admission))] == [
        "spec.admission.validating.webhooks[0].namespaceSelector"
    ]
    spared = _hook(
        namespaceSelector={
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]
        }
    )
    admission["validating"]["webhooks"] = [spared]
    assert problems(spec(admission=admission)) == []


def test_match_condition_that_does_not_compile_is_a_problem() -> None:
    hook = _hook(failurePolicy="Ignore", matchConditions=[{"name": "c", "expression": "request.userInfo.("}])
    found = problems(spec(admission={"validating": {"client": {"url": "https://x.example.com"}, "webhooks": [hook]}}))
    assert [p.field for p in found] == ["spec.admission.validating.webhooks[0].matchConditions[0].expression"]


@pytest.mark.parametrize(
    ("client", "extra", "where"),
    [
        (
            {"url": "https://x.example.com"},
            {"sideEffects": "Some"},
            "spec.admission.validating.webhooks[0].sideEffects",
        ),
        (
            {"url": "https://x.example.com"},
            {"sideEffects": "Unknown"},
            "spec.admission.validating.webhooks[0].sideEffects",
        ),
        (
            {"url": "https://x.example.com"},
            {"admissionReviewVersions": ["v2"]},
            "spec.admission.validating.webhooks[0].admissionReviewVersions",
        ),
        ({"url": "https://enclave.enclave-system.svc/hook"}, {}, "spec.admission.validating.client.url"),
        ({"url": "https://enclave.enclave-system.svc.cluster.local:8443"}, {}, "spec.admission.validating.client.url"),
    ],
)
def test_webhook_entries_kube_apiserver_would_refuse_are_problems(
    client: dict[str, str], extra: dict[str, object], where: str
) -> None:
    """Refused up front (admission and enclave-config share these rules), naming the field, instead of being
    applied half and leaving the configuration Ready=False after kube-apiserver refuses it."""
    hook = _hook(failurePolicy="Ignore", **extra)
    found = problems(spec(admission={"validating": {"client": client, "webhooks": [hook]}}))
    assert [p.field for p in found] == [where]


def test_webhook_entries_kube_apiserver_accepts_are_not_problems() -> None:
    for url in (
        "https://10.0.0.1:8443/x",
        "https://webhook.example.com",
        "https://127.0.0.1:9443",
        "https://svc.example",
    ):
        hook = _hook(failurePolicy="Ignore", admissionReviewVersions=["v1beta1", "v1"], sideEffects="NoneOnDryRun")
        assert problems(spec(admission={"validating": {"client": {"url": url}, "webhooks": [hook]}})) == [], url


def test_render_service_client_and_opts() -> None:
    hook = _hook(failurePolicy="Ignore", opts={"administrators": True, "serviceUsers": False})
    config = effective(
        "default",
        3,
        spec(
            administrators=[{"kind": "Group", "name": "ops"}],
            admission={
                "validating": {
                    "client": {"service": {"name": "svc", "namespace": "ns", "path": "/p/"}},
                    "webhooks": [hook],
                }
            },
        ),
    )
    rendered = webhooks.render(config, b"CA")
    configuration = rendered["ValidatingWebhookConfiguration"]
    assert configuration["metadata"]["name"] == "enclave-validating-webhook-configuration"
    entry = configuration["webhooks"][0]
    assert entry["clientConfig"]["service"] == {"name": "svc", "namespace": "ns", "port": 443, "path": "/p/all"}
    assert entry["clientConfig"]["caBundle"] == "Q0E="
    assert entry["matchConditions"] == [
        {"name": "enclave.dev/audience", "expression": '(request.userInfo.groups.exists(g, g in ["ops"]))'}
    ]
    assert "MutatingWebhookConfiguration" not in rendered


def test_rbac_subjects_include_users_admins_and_promoted_accounts() -> None:
    config = effective(
        "default",
        1,
        spec(
            users=[{"kind": "Group", "name": "t"}, {"kind": "ServiceAccount", "name": "system:serviceaccount:a:b"}],
            administrators=[{"kind": "User", "name": "root"}],
            allowServiceAccountPromotion=True,
        ),
    )
    binding = rbac.render(config, [("solar-dev", "ci")])[-1]
    assert binding["subjects"] == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "t"},
        {"kind": "ServiceAccount", "name": "b", "namespace": "a"},
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "root"},
        {"kind": "ServiceAccount", "name": "ci", "namespace": "solar-dev"},
    ]


def test_only_promoted_accounts_of_namespaces_a_tenant_lists_count() -> None:
    """A label outside any tenant (or on an account whose namespace left its tenant) grants nothing."""

    def account(namespace: str, name: str) -> dict[str, object]:
        return {"metadata": {"namespace": namespace, "name": name, "labels": {"enclave.dev/promoted": "true"}}}

    accounts = [
        account("solar-dev", "ci"),
        account("solar-dev", "deploy"),
        account("tools", "ci"),
        account("gone", "x"),
    ]
    tenants: list[dict[str, Any]] = [
        {"metadata": {"name": "solar"}, "status": {"namespaces": ["solar-dev", "solar-prod"]}},
        {"metadata": {"name": "fresh"}},  # no status yet
        {"metadata": {"name": "oil"}, "status": {"namespaces": ["oil-a"]}},
    ]
    assert rbac.promoted_in_tenants(accounts, tenants) == [("solar-dev", "ci"), ("solar-dev", "deploy")]
    assert rbac.promoted_in_tenants(accounts, []) == []
    assert rbac.promoted_in_tenants([], tenants) == []


def test_tls_plan_keeps_ca_and_renews_late_in_life() -> None:
    names = tls.service_names("svc", "ns")
    first = tls.plan({}, dns_names=names, ip_addresses=["127.0.0.1"], validity=timedelta(hours=3))
    assert first.reason == "CertificateAuthorityCreated"
    same = tls.plan(first.data, dns_names=names, ip_addresses=["127.0.0.1"], validity=timedelta(hours=3))
    assert same.reason == ""
    assert same.data == first.data
    later = datetime.now(UTC) + timedelta(hours=2, minutes=30)
    renewed = tls.plan(first.data, dns_names=names, ip_addresses=["127.0.0.1"], validity=timedelta(hours=3), now=later)
    assert renewed.reason == "ServingCertificateExpiring"
    assert renewed.data[tls.CA_CERT] == first.data[tls.CA_CERT]
    assert renewed.data[tls.TLS_CERT] != first.data[tls.TLS_CERT]
    moved = tls.plan(first.data, dns_names=[*names, "extra"], ip_addresses=["127.0.0.1"], validity=timedelta(hours=3))
    assert moved.reason == "ServingCertificateNamesChanged"


def test_short_validity_is_not_renewed_at_once() -> None:
    names = tls.service_names("svc", "ns")
    first = tls.plan({}, dns_names=names, ip_addresses=[], validity=timedelta(seconds=6))
    again = tls.plan(first.data, dns_names=names, ip_addresses=[], validity=timedelta(seconds=6))
    assert again.reason == ""
    assert 3.0 < tls.next_check(first.data) <= 6.0


def test_the_serving_leaf_serves_only() -> None:
    """The shared serving key is no client identity: it carries serverAuth alone, and one issued by an older
    release with clientAuth too (when every subscriber presented it) is re-issued, under the same CA."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    from enclave_core.pki import CertificateAuthority

    names = tls.service_names("svc", "ns")
    first = tls.plan({}, dns_names=names, ip_addresses=[], validity=timedelta(hours=3))
    cert = x509.load_pem_x509_certificate(first.data[tls.TLS_CERT])
    usages = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    assert usages == {ExtendedKeyUsageOID.SERVER_AUTH}
    ca = CertificateAuthority.from_pem(first.data[tls.CA_CERT], first.data[tls.CA_KEY])
    shared = ca.issue(names[0], dns_names=names, validity=timedelta(hours=3), client=True)
    old = {**first.data, tls.TLS_CERT: shared.cert_pem, tls.TLS_KEY: shared.key_pem}
    upgraded = tls.plan(old, dns_names=names, ip_addresses=[], validity=timedelta(hours=3))
    assert upgraded.reason == "ServingCertificateUsageChanged"
    assert upgraded.data[tls.CA_CERT] == first.data[tls.CA_CERT]


def test_each_component_gets_a_client_certificate_naming_it() -> None:
    from cryptography import x509

    from enclave_core.pki import component_of

    serving = tls.plan({}, dns_names=["svc"], ip_addresses=[], validity=timedelta(hours=3)).data
    first = tls.plan_client({}, serving, "enclave-admission", validity=timedelta(hours=3))
    assert first.reason == "ClientCertificateMissing"
    assert set(first.data) == {tls.TLS_CERT, tls.TLS_KEY, tls.CA_CERT}, "never the CA key"
    assert first.data[tls.CA_CERT] == serving[tls.CA_CERT]
    cert = x509.load_pem_x509_certificate(first.data[tls.TLS_CERT])
    assert component_of(cert) == "enclave-admission"
    assert cert.subject.rfc4514_string() == "CN=enclave-admission"
    assert tls.plan_client(first.data, serving, "enclave-admission", validity=timedelta(hours=3)).reason == ""
    assert tls.client_secret_name("enclave-tls", "enclave-admission") == "enclave-tls-client-admission"


def test_client_certificates_are_renewed_like_the_serving_one() -> None:
    names = ["svc"]
    serving = tls.plan({}, dns_names=names, ip_addresses=[], validity=timedelta(hours=3)).data
    first = tls.plan_client({}, serving, "enclave-pools", validity=timedelta(hours=3)).data
    later = datetime.now(UTC) + timedelta(hours=2, minutes=30)
    expiring = tls.plan_client(first, serving, "enclave-pools", validity=timedelta(hours=3), now=later)
    assert expiring.reason == "ClientCertificateExpiring"
    assert expiring.data[tls.TLS_CERT] != first[tls.TLS_CERT]
    other = tls.plan_client(first, serving, "enclave-admission", validity=timedelta(hours=3))
    assert other.reason == "ClientCertificateIdentityChanged", "a Secret holding another component's identity"
    new_ca = tls.plan({}, dns_names=names, ip_addresses=[], validity=timedelta(hours=3)).data
    moved = tls.plan_client(first, new_ca, "enclave-pools", validity=timedelta(hours=3))
    assert moved.reason == "ClientCertificateNotFromCA"
    assert moved.data[tls.CA_CERT] == new_ca[tls.CA_CERT]
    planted = tls.plan_client({**first, tls.CA_KEY: b"x"}, serving, "enclave-pools", validity=timedelta(hours=3))
    assert planted.reason == "UnexpectedKeys"
    assert tls.CA_KEY not in planted.data


def test_a_generated_object_holds_what_was_applied_whatever_the_server_defaulted() -> None:

    from enclave_core.kube.holds import holds

    desired: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "v", "labels": {"a": "b"}},
        "webhooks": [{"name": "x", "rules": [{"operations": ["CREATE"]}]}],
    }
    # A list response's item: no apiVersion/kind, server-side defaults and metadata added.
    live = {
        "metadata": {"name": "v", "labels": {"a": "b", "other": "c"}, "resourceVersion": "7"},
        "webhooks": [{"name": "x", "rules": [{"operations": ["CREATE"], "scope": "*"}], "timeoutSeconds": 10}],
    }
    assert holds(live, desired)
    with_empty = {**desired, "metadata": {**desired["metadata"], "annotations": {}}}
    assert holds(live, with_empty), "the apiserver stores no empty annotations"
    drifted = {**live, "webhooks": [{"name": "x", "rules": [{"operations": ["DELETE"], "scope": "*"}]}]}
    assert not holds(drifted, desired)
    extra = {**live, "webhooks": [*live["webhooks"], {"name": "y"}]}
    assert not holds(extra, desired), "a list item someone added is drift too"
    assert not holds({"metadata": {"name": "v"}}, desired)


def test_only_tenant_names_and_aggregated_owners_wake_the_configuration() -> None:
    from typing import Any, cast

    from enclave_config.controller import ConfigController, Settings
    from enclave_core.snapshots.hub import SnapshotHub

    kube: Any = cast(Any, None)  # nothing here talks to the API: informers are fed by hand
    controller = ConfigController(kube, Settings("c", "ns", timedelta(days=1)), SnapshotHub("t"), cast(Any, None))
    woken = controller.loop.write_wanted

    def tenant(name: str, size: int) -> dict[str, object]:
        return {"metadata": {"name": name}, "status": {"size": size}}

    controller.tenants.items["a"] = tenant("a", 0)
    controller._tenants_changed("a")
    assert woken.is_set()
    woken.clear()
    controller.tenants.items["a"] = tenant("a", 5)  # what every namespace event does to a tenant
    controller._tenants_changed("a")
    assert not woken.is_set()
    del controller.tenants.items["a"]
    controller._tenants_changed("a")
    assert woken.is_set()

    woken.clear()
    controller.owners.items["o"] = {"metadata": {"name": "o"}, "spec": {"kind": "User", "name": "u"}}
    controller._owners_changed("o")
    assert not woken.is_set(), "an owner that aggregates nothing changes no tenant user"
    controller.owners.items["o"] = {"metadata": {"name": "o"}, "spec": {"kind": "User", "name": "u", "aggregate": True}}
    controller._owners_changed("o")
    assert woken.is_set()


def test_a_tenant_taking_or_dropping_a_promoted_accounts_namespace_wakes_the_configuration() -> None:
    """The provisioner binding follows which promoted accounts live in tenant namespaces; other namespace
    changes of a tenant's status wake nothing."""
    from typing import Any, cast

    from enclave_config.controller import ConfigController, Settings
    from enclave_core.snapshots.hub import SnapshotHub

    kube: Any = cast(Any, None)  # nothing here talks to the API: informers are fed by hand
    controller = ConfigController(kube, Settings("c", "ns", timedelta(days=1)), SnapshotHub("t"), cast(Any, None))
    woken = controller.loop.write_wanted

    def tenant(*namespaces: str) -> dict[str, object]:
        return {"metadata": {"name": "a"}, "status": {"namespaces": list(namespaces)}}

    controller.tenants.items["a"] = tenant("a-1")
    controller._tenants_changed("a")
    controller.promoted.items["a-2/ci"] = {"metadata": {"namespace": "a-2", "name": "ci"}}
    controller._promoted_changed("a-2/ci")
    assert controller._promoted_accounts() == []  # a-2 is no tenant's (yet)
    woken.clear()
    controller.tenants.items["a"] = tenant("a-1", "a-3")
    controller._tenants_changed("a")
    assert not woken.is_set(), "a namespace without promoted accounts changes no binding"
    controller.tenants.items["a"] = tenant("a-1", "a-2", "a-3")
    controller._tenants_changed("a")
    assert woken.is_set()
    assert controller._promoted_accounts() == [("a-2", "ci")]
    woken.clear()
    controller.tenants.items["a"] = tenant("a-1", "a-3")  # a-2 left the tenant
    controller._tenants_changed("a")
    assert woken.is_set()
    assert controller._promoted_accounts() == []
