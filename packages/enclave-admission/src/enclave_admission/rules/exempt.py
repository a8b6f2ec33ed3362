"""Whose requests and which objects tenant rules never judge, and why (the one place that decides it).

An empty audience means *every* request: objects controllers create for tenants (Pods of a ReplicaSet, Jobs
of a CronJob, the claims of a StatefulSet) are judged like those a user creates, so a rule cannot be side-
stepped by going through a controller. What is never judged is the cluster keeping itself running:

* users in ``ignoreUserWithGroups`` (the specification says the service ignores them);
* ``system:masters``: break-glass cluster administrators, who bypass RBAC and could remove the webhook anyway;
* ``system:`` users that are not service accounts: kubelets (mirror Pods, node-local objects), the scheduler
  and kube-controller-manager's own identity;
* the control plane's maintenance of its own objects in every namespace, whoever writes them: Events,
  Leases, Endpoints, EndpointSlices, the ``kube-root-ca.crt`` ConfigMap and the ``default`` ServiceAccount
  (a rule about "every ConfigMap" must not stop a namespace from working);
* Enclave's own service accounts: the webhook configuration skips them with a matchCondition (they are the
  only exempt writers of the objects Enclave manages; a tenant adding Enclave's labels to an object gains
  nothing, since no decision here reads them).

Workload controllers run as ``system:serviceaccount:kube-system:<controller>`` when kube-controller-manager
uses per-controller credentials (``--use-service-account-credentials``, the default of kubeadm and managed
clusters), so their Pods are judged. Without it they share kube-controller-manager's identity and are exempt.
"""

from __future__ import annotations

from typing import Final

from enclave_admission.review import AdmissionRequest
from enclave_admission.state import Role, State
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX

UNGOVERNED: Final = frozenset(
    {
        ("", "events"),
        ("events.k8s.io", "events"),
        ("coordination.k8s.io", "leases"),
        ("", "endpoints"),
        ("discovery.k8s.io", "endpointslices"),
    }
)
"""(API group, resource) the control plane writes constantly and no rule is about."""

MAINTAINED: Final = frozenset({("", "configmaps", "kube-root-ca.crt"), ("", "serviceaccounts", "default")})
"""(API group, resource, name) objects the control plane keeps in every namespace."""

JUDGED_SUBRESOURCES: Final = frozenset({"ephemeralcontainers"})
"""Subresources that change what rules govern (the rest are status and scale)."""


def exemption(request: AdmissionRequest, state: State) -> str:
    """Why ``request`` is not judged (a CamelCase reason), or an empty string when it is."""
    if request.sub_resource and request.sub_resource not in JUDGED_SUBRESOURCES:
        return "NotGoverned"
    if (request.group, request.resource) in UNGOVERNED:
        return "NotGoverned"
    if (request.group, request.resource, request.name) in MAINTAINED:
        return "ControlPlaneObject"
    if "system:masters" in request.groups:
        return "ClusterAdministrator"
    username = request.username
    if username.startswith("system:") and not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return "ControlPlane"
    if state.subject(username, request.groups).role is Role.IGNORED:
        return "IgnoredUser"
    return ""
