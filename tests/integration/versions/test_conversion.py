"""v1beta1 and v1beta2 on a real kube-apiserver, converted by the admission server's ``/convert``.

Every kind is created as v1beta1 and read as v1beta2 and back, field for field; a v1beta1 Tenant with the
deprecated layout is admitted exactly like its v1beta2 twin; what v1beta2 cannot hold is refused at write time
naming the field; enclave-config injects the conversion client and CA into the CRDs and migrates objects
stored as v1beta1 (proved by reading etcd itself and ``status.storedVersions``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_admission.routes import ROUTES
from enclave_core.api import KINDS, kind_info
from enclave_core.api.conversion import HUB, SPOKE, convert
from enclave_core.api.crdgen import crd_for
from enclave_core.api.names import CONVERSION_ANNOTATION, CRD_DIGEST_ANNOTATION
from enclave_testing.controlplane import ControlPlane
from enclave_testing.examples import example
from enclave_testing.examples_v1beta1 import example_v1beta1
from enclave_testing.names import unique
from enclave_testing.waiting import poll

from .conftest import GROUP, Stack


def _edit_as_v1beta1(stack: Stack, kind: str, name: str, edit: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read as v1beta1, apply ``edit``, write back (retrying when a controller wrote status in between)."""

    def attempt() -> tuple[dict[str, Any], dict[str, Any]] | None:
        spoke = stack.get(kind, name, "v1beta1")
        if edit is not None:
            edit(spoke)
        try:
            written = stack.custom.replace_cluster_custom_object(GROUP, "v1beta1", kind_info(kind).plural, name, spoke)
        except ApiException as err:
            if err.status == 409:
                return None
            raise
        return spoke, dict(written)

    result: tuple[dict[str, Any], dict[str, Any]] = poll(attempt, what=f"write {kind} {name} as v1beta1")
    return result


def _named(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["name"] = unique(obj["metadata"]["name"])[:63]
    return obj


@pytest.mark.parametrize("kind", [info.kind for info in KINDS])
def test_created_as_v1beta1_reads_as_v1beta2_and_back_field_for_field(stack: Stack, kind: str) -> None:
    created = stack.create(_named(example_v1beta1(kind)))
    name = created["metadata"]["name"]
    hub = stack.get(kind, name, "v1beta2")
    assert hub["apiVersion"] == HUB
    assert hub["spec"] == convert(created, HUB)["spec"], "v1beta2 holds exactly the converted v1beta1 spec"
    assert CONVERSION_ANNOTATION not in (hub["metadata"].get("annotations") or {})
    spoke = stack.get(kind, name, "v1beta1")
    assert spoke["spec"] == created["spec"]
    assert spoke["metadata"].get("annotations") == created["metadata"].get("annotations")


@pytest.mark.parametrize("kind", ["Tenant", "ServiceConfiguration"])
def test_created_as_v1beta2_reads_as_v1beta1_and_writes_back_unchanged(stack: Stack, kind: str) -> None:
    obj = _named(example(kind))
    if kind == "ServiceConfiguration":
        # Never reconciled (no config process owns this name); webhook entries left out so that the
        # configuration webhook has nothing to refuse. `admission` and `users` still have no v1beta1 field.
        for side in ("mutating", "validating"):
            obj["spec"]["admission"][side].pop("webhooks")
    created = stack.create(obj)
    name = created["metadata"]["name"]
    spoke, replaced = _edit_as_v1beta1(stack, kind, name)
    assert CONVERSION_ANNOTATION in spoke["metadata"]["annotations"], "v1beta2-only fields travel in the annotation"
    assert replaced["spec"] == spoke["spec"]
    assert stack.get(kind, name, "v1beta2")["spec"] == created["spec"]


def test_a_v1beta1_edit_keeps_v1beta2_only_fields(stack: Stack) -> None:
    created = stack.create(_named(example("Tenant")))
    name = created["metadata"]["name"]
    _edit_as_v1beta1(stack, "Tenant", name, lambda spoke: spoke["spec"].update(namespaceQuota=7))
    hub = stack.get("Tenant", name, "v1beta2")
    assert hub["spec"]["namespaceOptions"]["quota"] == 7
    assert hub["spec"]["rules"] == created["spec"]["rules"]
    assert hub["spec"]["proxy"] == created["spec"]["proxy"], "spec.proxy has no v1beta1 field either"


def test_what_v1beta2_cannot_hold_is_refused_at_write_naming_the_field(stack: Stack) -> None:
    obj = _named(example_v1beta1("ServiceConfiguration"))
    obj["spec"]["userGroups"] = [f"group-{i}" for i in range(200)]
    obj["spec"]["userNames"] = [f"user-{i}" for i in range(100)]
    with pytest.raises(ApiException) as err:
        stack.custom.create_cluster_custom_object(GROUP, "v1beta1", "serviceconfigurations", obj)
    assert err.value.status == 422
    assert "spec.userGroups" in err.value.body
    assert "at most 256 entries together" in err.value.body
    with pytest.raises(ApiException) as missing:
        stack.custom.get_cluster_custom_object(GROUP, "v1beta2", "serviceconfigurations", obj["metadata"]["name"])
    assert missing.value.status == 404, "nothing stored, not even half"


def test_a_tampered_conversion_annotation_is_refused_on_write(stack: Stack) -> None:
    obj = _named(example_v1beta1("Tenant"))
    obj["metadata"]["annotations"] = {CONVERSION_ANNOTATION: "{not json"}
    with pytest.raises(ApiException) as err:
        stack.custom.create_cluster_custom_object(GROUP, "v1beta1", "tenants", obj)
    assert f"metadata.annotations[{CONVERSION_ANNOTATION}]" in err.value.body


# -- admission: the deprecated layout decides like its v1beta2 twin -----------------------------------------


def _attempt(stack: Stack, user: str, name: str, labels: dict[str, str] | None = None) -> str:
    """Create a namespace as ``user``; "created" or the refusal message (tenant names normalised)."""
    api = client.CoreV1Api(stack.impersonate(user, ["enclave.dev"]))
    try:
        api.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
    except ApiException as err:
        return str(json.loads(err.body).get("message", err.body))
    return "created"


def test_a_v1beta1_tenant_with_deprecated_fields_behaves_like_its_v1beta2_twin(stack: Stack) -> None:
    old, new = unique("old"), unique("new")
    alice, bob = unique("alice"), unique("bob")
    stack.create(
        {
            "apiVersion": SPOKE,
            "kind": "Tenant",
            "metadata": {"name": old},
            "spec": {
                "owners": [{"kind": "User", "name": alice}],
                "namespaceQuota": 1,
                "namespacesMetadata": {"additionalLabels": {"tier": "gold"}},
                "forbiddenNamespaceLabels": {"denied": ["forbidden"], "deniedRegex": "^secret-"},
            },
        }
    )
    stack.create(
        {
            "apiVersion": HUB,
            "kind": "Tenant",
            "metadata": {"name": new},
            "spec": {
                "owners": [{"kind": "User", "name": bob}],
                "namespaceOptions": {
                    "quota": 1,
                    "additionalMetadata": {"labels": {"tier": "gold"}},
                    "forbiddenLabels": {"denied": ["forbidden"], "deniedRegex": "^secret-"},
                },
            },
        }
    )
    outcomes: dict[str, list[str]] = {}
    for tenant, user in ((old, alice), (new, bob)):

        def first(tenant: str = tenant, user: str = user) -> str | None:
            # Until admission's snapshot has the tenant, the owner owns nothing; then the forbidden label is
            # refused. Anything else (another hook refusing, the label let through) is answered at the deadline.
            outcome = _attempt(stack, user, f"{tenant}-a", {"forbidden": "x"})
            return outcome if f"for namespaces of tenant {tenant}" in outcome else None

        poll(first, timeout=30, what=f"admission refuses tenant {tenant}'s forbidden label")
        steps = [
            _attempt(stack, user, f"{tenant}-a", {"secret-key": "x"}),
            _attempt(stack, user, f"{tenant}-a"),
            _attempt(stack, user, f"{tenant}-b"),
        ]
        outcomes[tenant] = [step.replace(tenant, "<tenant>").replace(user, "<user>") for step in steps]
        assert steps[1] == "created", f"the plain create of {tenant}-a was answered: {steps}"

        def labelled(tenant: str = tenant) -> bool:
            namespace = client.CoreV1Api(stack.kube).read_namespace(f"{tenant}-a")
            return (namespace.metadata.labels or {}).get("tier") == "gold"

        poll(labelled, what="namespace metadata from the tenant")
    assert outcomes[old] == outcomes[new]
    forbidden, created, over_quota = outcomes[old]
    assert "secret-key" in forbidden
    assert created == "created"
    assert "quota" in over_quota.lower()
    for tenant in (old, new):
        with contextlib.suppress(ApiException):
            client.CoreV1Api(stack.kube).delete_namespace(f"{tenant}-a")


def test_a_v1beta1_tenant_write_is_validated_in_its_v1beta2_shape(stack: Stack) -> None:
    """The hooks match Enclave's kinds in v1beta2 only (matchPolicy Equivalent), so kube-apiserver converts a
    v1beta1 write before /tenants sees it. Here the v1beta1 layout (namespaceQuota, forbiddenNamespaceLabels)
    carries, in the conversion annotation, v1beta2-only rules that the conversion restores: the hook judges
    the rules, which a v1beta1-shaped review would not even have, and refuses the broken one naming the v1beta2
    field; fixed, the same write is admitted and stored in the v1beta2 layout."""
    owner, operator = unique("carol"), unique("operator")
    # An operator allowed to write Tenants (system:masters, the admin client's group, skips the hook).
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    rbac.create_cluster_role(
        {
            "metadata": {"name": operator},
            "rules": [{"apiGroups": [GROUP], "resources": ["tenants"], "verbs": ["create", "get", "delete"]}],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": operator},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": operator},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": operator}],
        }
    )
    as_operator = client.CustomObjectsApi(stack.impersonate(operator, ["operators"]))

    def tenant(expression: str) -> dict[str, Any]:
        hub_spec = {
            "owners": [{"kind": "User", "name": owner}],
            "namespaceOptions": {"quota": 2},
            "rules": [{"enforce": {"action": "deny", "conditions": [{"name": "c", "expression": expression}]}}],
        }
        return {
            "apiVersion": SPOKE,
            "kind": "Tenant",
            "metadata": {
                "name": unique("shape"),
                "annotations": {CONVERSION_ANNOTATION: json.dumps({"apiVersion": HUB, "spec": hub_spec})},
            },
            "spec": {
                "owners": [{"kind": "User", "name": owner}],
                "namespaceQuota": 2,
                "forbiddenNamespaceLabels": {"denied": ["forbidden"]},
            },
        }

    broken, fixed = tenant("object.("), tenant("object.metadata.name == 'x'")
    try:

        def refused() -> str | None:
            try:
                as_operator.create_cluster_custom_object(GROUP, "v1beta1", "tenants", broken)
            except ApiException as err:
                if "cannot create resource" in str(err.body):  # RBAC not caught up with the binding yet
                    return None
                return str(json.loads(str(err.body))["message"])
            stack.created.append(("tenants", broken["metadata"]["name"], None))
            return "created"

        message = poll(refused, timeout=10, what="the operator's write answered")
        assert "a rule cannot work" in message, message
        assert "spec.rules[0].enforce.conditions[0]" in message, message
        with pytest.raises(ApiException) as missing:
            stack.get("Tenant", broken["metadata"]["name"], "v1beta2")
        assert missing.value.status == 404
        as_operator.create_cluster_custom_object(GROUP, "v1beta1", "tenants", fixed)
        stack.created.append(("tenants", fixed["metadata"]["name"], None))
        hub = stack.get("Tenant", fixed["metadata"]["name"], "v1beta2")
        assert hub["spec"]["namespaceOptions"] == {"quota": 2, "forbiddenLabels": {"denied": ["forbidden"]}}
        assert hub["spec"]["rules"][0]["enforce"]["conditions"][0]["expression"] == "object.metadata.name == 'x'"
    finally:
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(operator)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(operator)


# -- conversion with webhook client authentication on --------------------------------------------------------


def _call(stack: Stack, path: str, body: dict[str, Any], certificate: tuple[Any, Any] | None = None) -> int:
    """POST ``body`` to admission's ``path`` the way a pod that reaches the port would; the HTTP status."""
    ca = base64.b64decode(
        client.CoreV1Api(stack.kube).read_namespaced_secret("enclave-tls", stack.namespace).data["ca.crt"]
    )
    context = ssl.create_default_context(cadata=ca.decode())
    if certificate is not None:
        context.load_cert_chain(*certificate)
    request = urllib.request.Request(
        f"{stack.admission_url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_without_a_client_certificate_only_convert_answers(stack: Stack, control_plane: ControlPlane) -> None:
    """Admission runs with --client-ca-file here, so every v1beta1 read and write of this module already went
    through kube-apiserver's certificate-less conversion calls; a caller without a certificate still reaches
    no admission decision, and one with the apiserver's certificate reaches both."""
    tenant = stack.create(_named(example_v1beta1("Tenant")))
    conversion = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "direct", "desiredAPIVersion": HUB, "objects": [tenant]},
    }
    assert _call(stack, "/convert", conversion) == 200
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "forged",
            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "forged",
            "operation": "CREATE",
            "userInfo": {"username": "mallory", "groups": ["enclave.dev"]},
            "object": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "forged"}},
        },
    }
    for path in [*ROUTES, "/healthz", "/nowhere"]:
        assert _call(stack, path, review) == 403, path
    assert _call(stack, "/namespaces", review, control_plane.webhook_client_cert) == 200


# -- the CRD bundle and storage migration ----------------------------------------------------------------


def test_the_conversion_client_carries_the_tls_reconcilers_ca(stack: Stack) -> None:
    secret = client.CoreV1Api(stack.kube).read_namespaced_secret("enclave-tls", stack.namespace)
    ca = secret.data["ca.crt"]
    extensions = client.ApiextensionsV1Api(stack.kube)
    for info in KINDS:
        webhook = extensions.read_custom_resource_definition(info.crd_name).spec.conversion.webhook
        assert webhook.client_config.url == f"{stack.admission_url}/convert", info.crd_name
        assert webhook.client_config.ca_bundle == ca, info.crd_name


def _etcd_api_version(control_plane: ControlPlane, key: str) -> str:
    """The apiVersion an object is stored with, read from etcd itself (its JSON gateway)."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
    request = urllib.request.Request(f"{control_plane.etcd_url}/v3/kv/range", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        kvs = json.loads(response.read())["kvs"]
    return str(json.loads(base64.b64decode(kvs[0]["value"]))["apiVersion"])


def test_objects_stored_as_v1beta1_are_migrated_to_v1beta2(stack: Stack, control_plane: ControlPlane) -> None:
    """An older release stored v1beta1; the upgrade brings v1beta2 storage; enclave-config rewrites the objects
    and trims ``storedVersions``. Proved on etcd itself."""
    extensions = client.ApiextensionsV1Api(stack.kube)
    info = kind_info("Tenant")

    def older_release() -> bool:
        current = extensions.read_custom_resource_definition(info.crd_name)
        crd = crd_for(info, storage="v1beta1")
        crd["spec"]["conversion"] = stack.kube.sanitize_for_serialization(current.spec.conversion)
        # Stamped as current, so enclave-config leaves this definition alone until the "upgrade" below.
        crd["metadata"]["annotations"] = {
            CRD_DIGEST_ANNOTATION: (current.metadata.annotations or {})[CRD_DIGEST_ANNOTATION]
        }
        crd["metadata"]["resourceVersion"] = current.metadata.resource_version
        try:
            extensions.replace_custom_resource_definition(info.crd_name, crd)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    old, new = unique("stored-old"), unique("stored-new")
    rules: list[Any] = []
    try:
        poll(older_release, what="the CRD of an older release, storing v1beta1")
        stack.create({**_named(example_v1beta1("Tenant")), "metadata": {"name": old}})
        rules += stack.create({**example("Tenant"), "metadata": {"name": new}})["spec"]["rules"]
        writes = iter(range(1000))

        def stored_as_v1beta1() -> bool:
            # kube-apiserver swaps a CRD's storage a moment after the update: write until the writes land there.
            for name in (old, new):
                patch = {"metadata": {"labels": {"write": str(next(writes))}}}
                stack.custom.patch_cluster_custom_object(GROUP, "v1beta2", "tenants", name, patch)
            return all(
                _etcd_api_version(control_plane, f"/registry/enclave.dev/tenants/{name}") == SPOKE
                for name in (old, new)
            )

        poll(stored_as_v1beta1, what="objects written while the CRD stores v1beta1")
        assert "v1beta1" in extensions.read_custom_resource_definition(info.crd_name).status.stored_versions
    finally:
        # The upgrade: the definition is no longer this release's, so enclave-config applies its own (v1beta2
        # stored) and migrates. The same path runs if the test failed above, so nothing stays stored as v1beta1.
        unstamp = {"metadata": {"annotations": {CRD_DIGEST_ANNOTATION: None}}}
        extensions.patch_custom_resource_definition(info.crd_name, unstamp)
        poll(
            lambda: extensions.read_custom_resource_definition(info.crd_name).status.stored_versions == ["v1beta2"],
            timeout=60,
            what="enclave-config applies its CRD, migrates storage and trims storedVersions",
        )
    for name in (old, new):
        assert _etcd_api_version(control_plane, f"/registry/enclave.dev/tenants/{name}") == HUB
    assert stack.get("Tenant", old, "v1beta2")["spec"]["namespaceOptions"]["quota"] == 3
    assert stack.get("Tenant", new, "v1beta2")["spec"]["rules"] == rules
    versions = extensions.read_custom_resource_definition(info.crd_name).spec.versions
    assert [(v.name, v.storage) for v in versions] == [("v1beta1", False), ("v1beta2", True)]
