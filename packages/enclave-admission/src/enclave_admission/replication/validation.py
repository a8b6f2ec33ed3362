"""Replication protection (``/replication``): only the managing identity changes or deletes a managed object.

The hook sees UPDATE and DELETE of objects carrying ``enclave.dev/managed-by`` (old or new object), with the
control plane's own requests skipped by a matchCondition (the garbage collector and the namespace controller
must still clean up). The decision is a lookup in the Replication snapshot: an object a GlobalTenantResource or
TenantResource manages with ``policy.protect`` may be changed only by the identities the snapshot lists (the
resource's acting service account, the replication controller), by users in ``ignoreUserWithGroups``, and by
every Enclave component: the service accounts of Enclave's own namespace (``--namespace``, where the chart runs
every component; the same accounts the namespace hooks skip). Without that last rule an object replication had
adopted could no longer be changed by the component managing it (enclave-tenants removing a RoleBinding when an
owner leaves, issue 29); replication also refuses to adopt such objects, this is the second fence.
Everyone else, tenant owners and administrators alike, is told which resource manages the object, so the change
goes there.
"""

from __future__ import annotations

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import Role, State
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX


def validate(request: AdmissionRequest, state: State) -> Decision:
    if request.operation not in ("UPDATE", "DELETE") or request.sub_resource:
        return Decision.allow()
    snapshot = state.replication
    managed = snapshot.index.get((request.group, request.kind, request.namespace, request.name))
    if managed is None:
        return Decision.allow()
    username = request.username
    if username == snapshot.controller or username in managed.managers:
        return Decision.allow("ReplicationManager")
    if state.namespace and username.startswith(f"{SERVICE_ACCOUNT_PREFIX}{state.namespace}:"):
        return Decision.allow("EnclaveComponent")
    if state.subject(username, request.groups).role is Role.IGNORED:
        return Decision.allow("Ignored")
    action = "delete" if request.operation == "DELETE" else "change"
    where = f"{request.namespace}/{request.name}" if request.namespace else request.name
    return Decision.deny(
        "ReplicatedObjectProtected",
        f"{request.kind} {where} is replicated by {managed.owner} and protected (policy.protect): {username} "
        f"may not {action} it; change the {managed.owner.partition('/')[0]} instead",
    )
