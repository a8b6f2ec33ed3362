"""Compiled native-rules policies created by a test itself, bound to one namespace alone.

enclave-tenants' native loop prunes every policy labelled as its own that it did not compile, so a test that
wants kube-apiserver to judge a program on its own (the native differential, the injection attacks) renames the
objects after the namespace, labels them with a label of its own, and binds them by the namespace's name only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes import client


def create_bound_to(kube: Any, made: Iterable[dict[str, Any]], namespace: str, label: str) -> None:
    """Create ``made`` (:func:`enclave_tenants.native.objects.policies` output, changed in place) renamed for
    ``namespace``, labelled ``label: "true"``, each binding selecting ``namespace`` alone."""
    registrations = client.AdmissionregistrationV1Api(kube)
    for obj in made:
        obj["metadata"]["name"] += "-" + namespace
        obj["metadata"]["labels"] = {label: "true"}
        if obj["kind"] == "ValidatingAdmissionPolicy":
            registrations.create_validating_admission_policy(obj)
        else:
            obj["spec"]["policyName"] += "-" + namespace
            obj["spec"]["matchResources"]["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}
            }
            registrations.create_validating_admission_policy_binding(obj)
