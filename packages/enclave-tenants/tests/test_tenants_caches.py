"""What enclave-tenants keeps of the objects it caches by the thousand: enough for every comparison it makes."""

from __future__ import annotations

import copy

from enclave_core.api.names import TENANTS_MANAGER
from enclave_core.kube import managedfields
from enclave_core.kube.rest import JSON
from enclave_tenants import bindings as rb
from enclave_tenants import namespaces as ns
from enclave_tenants.caches import _binding_trim, _namespace_trim, _rule_status_trim

TENANT_UID = "adde3ee4-09d6-4ecc-8493-5779ebee8ea8"


def _namespace(name: str, version: str) -> JSON:
    """As kube-apiserver returns one we applied to: admission's label and reference, our apply entry."""
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": version,
            "creationTimestamp": "2026-11-23T22:19:07Z",
            "labels": {"enclave.dev/tenant": "samp", "kubernetes.io/metadata.name": name},
            "ownerReferences": [
                {"apiVersion": "enclave.dev/v1beta2", "kind": "Tenant", "name": "samp", "uid": TENANT_UID}
            ],
            "managedFields": [
                {"manager": "kubectl", "operation": "Update", "time": "2026-11-23T22:19:07Z", "fieldsV1": {}},
                {
                    "manager": TENANTS_MANAGER,
                    "operation": "Apply",
                    "apiVersion": "v1",
                    "time": f"2026-11-23T22:19:0{version[-1]}Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:labels": {"f:enclave.dev/tenant": {}},
                            "f:ownerReferences": {f'k:{{"uid":"{TENANT_UID}"}}': {}},
                        }
                    },
                },
            ],
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def test_namespaces_keep_what_the_comparisons_read_and_share_what_a_tenants_namespaces_repeat() -> None:
    raw_one, raw_two = _namespace("samp-00", "11"), _namespace("samp-01", "12")
    one, two = _namespace_trim(copy.deepcopy(raw_one)), _namespace_trim(copy.deepcopy(raw_two))
    body = ns.namespace_body("samp-00", "samp", TENANT_UID, {"enclave.dev/tenant": "samp"}, {}, one)
    for trimmed, raw in ((one, raw_one), (two, raw_two)):
        assert ns.needs_apply(trimmed, body, TENANTS_MANAGER) == ns.needs_apply(raw, body, TENANTS_MANAGER)
        assert managedfields.applied_fields(trimmed, TENANTS_MANAGER) == managedfields.applied_fields(
            raw, TENANTS_MANAGER
        )
        assert ns.tenant_of(trimmed) == "samp"
        assert trimmed["metadata"]["uid"] == raw["metadata"]["uid"]  # Events name it
        assert trimmed["status"] == {"phase": "Active"}
        assert "spec" not in trimmed
    assert [entry["manager"] for entry in one["metadata"]["managedFields"]] == [TENANTS_MANAGER]
    assert one["metadata"]["ownerReferences"] is two["metadata"]["ownerReferences"]
    assert one["metadata"]["managedFields"] is two["metadata"]["managedFields"]  # the entry's time is dropped


def test_role_bindings_keep_what_drift_is_decided_on() -> None:
    desired = rb.role_binding("samp-00", "owner", "samp", "admin", [{"kind": "User", "name": "alice"}])
    live = {
        **copy.deepcopy(desired),
        "metadata": {
            **desired["metadata"],
            "uid": "u",
            "resourceVersion": "7",
            "creationTimestamp": "2026-11-23T22:19:07Z",
            "managedFields": [{"manager": TENANTS_MANAGER, "operation": "Apply", "fieldsV1": {}}],
        },
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}],
    }
    trimmed = _binding_trim(copy.deepcopy(live))
    assert trimmed["metadata"] == {
        "name": "owner",
        "namespace": "samp-00",
        "resourceVersion": "7",
        "labels": desired["metadata"]["labels"],
    }
    assert not rb.drifted(trimmed, desired)
    other_role = rb.role_binding("samp-00", "owner", "samp", "edit", [{"kind": "User", "name": "alice"}])
    other_subject = rb.role_binding("samp-00", "owner", "samp", "admin", [{"kind": "User", "name": "bob"}])
    for wanted in (other_role, other_subject):
        assert rb.drifted(trimmed, wanted) == rb.drifted(live, wanted) is True
    assert rb.roleref_changed(trimmed, other_role)


def test_rule_statuses_keep_spec_status_and_generation() -> None:
    live = {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "RuleStatus",
        "metadata": {
            "name": "default",
            "namespace": "samp-00",
            "uid": "u",
            "generation": 3,
            "resourceVersion": "9",
            "creationTimestamp": "2026-11-23T22:19:07Z",
            "managedFields": [{"manager": "x", "operation": "Update", "fieldsV1": {}}],
        },
        "spec": [{"enforce": {}}],
        "status": {"size": 0, "rules": [], "conditions": [{"type": "Ready", "status": "True"}]},
    }
    trimmed = _rule_status_trim(copy.deepcopy(live))
    assert trimmed["spec"] == live["spec"]
    assert trimmed["status"] == live["status"]
    assert trimmed["metadata"]["generation"] == 3
    assert trimmed["metadata"]["uid"] == "u"
    assert "managedFields" not in trimmed["metadata"]
    assert "creationTimestamp" not in trimmed["metadata"]
