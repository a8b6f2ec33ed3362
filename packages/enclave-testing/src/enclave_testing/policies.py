"""Compiled native-rules policies created by a test itself, bound to one namespace alone.

enclave-tenants' native loop prunes every policy labelled as its own that it did not compile, so a test that
wants kube-apiserver to judge a program on its own (the native differential, the injection attacks) renames the
objects after the namespace, labels them with a label of its own, and binds them by the namespace's name only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes import client

_PLURALS = {
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}
"""The kinds the Python client has no typed calls for, written through the generic object paths."""


def create_bound_to(kube: Any, made: Iterable[dict[str, Any]], namespace: str, label: str) -> None:
    """Create ``made`` (:func:`enclave_tenants.native.objects.policies` output, changed in place) renamed for
    ``namespace``, labelled ``label: "true"``, each binding selecting ``namespace`` alone."""
    registrations = client.AdmissionregistrationV1Api(kube)
    generic = client.CustomObjectsApi(kube)
    for obj in made:
        obj["metadata"]["name"] += "-" + namespace
        obj["metadata"]["labels"] = {label: "true"}
        if obj["kind"].endswith("Binding"):
            obj["spec"]["policyName"] += "-" + namespace
            obj["spec"]["matchResources"]["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}
            }
        if obj["kind"] in _PLURALS:
            generic.create_cluster_custom_object("admissionregistration.k8s.io", "v1", _PLURALS[obj["kind"]], obj)
        elif obj["kind"] == "ValidatingAdmissionPolicy":
            registrations.create_validating_admission_policy(obj)
        else:
            registrations.create_validating_admission_policy_binding(obj)


def delete_labelled(kube: Any, label: str) -> None:
    """Delete the MutatingAdmissionPolicies and their bindings :func:`create_bound_to` labelled ``label``."""
    generic = client.CustomObjectsApi(kube)
    for plural in reversed(list(_PLURALS.values())):
        listed = generic.list_cluster_custom_object("admissionregistration.k8s.io", "v1", plural, label_selector=label)
        for obj in listed.get("items") or ():
            generic.delete_cluster_custom_object("admissionregistration.k8s.io", "v1", plural, obj["metadata"]["name"])
