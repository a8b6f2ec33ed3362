"""RoleBinding guard (``/rolebindings``): tenants cannot delete or rewrite the bindings Enclave keeps.

enclave-tenants writes, in every tenant namespace, the owners' and ``additionalRoleBindings``' RoleBindings and the
``enclave-component-*`` grants its ``--namespace-grant`` flags name (replication's impersonation, managed
metadata), all labelled ``app.kubernetes.io/managed-by: enclave-tenants``. An owner holds ``admin`` in the
namespace, and ``admin`` may delete and edit RoleBindings: without this hook an owner could delete a component's
grant (replication and managed metadata stop working in the namespace until the controller's next pass), bind
their own role to someone else by rewriting a binding's subjects, or keep a binding that enclave-tenants meant to
remove by stripping its label. The hook sees CREATE, UPDATE and DELETE of RoleBindings carrying the label before
or after the change (an objectSelector, so no other RoleBinding write ever waits on Enclave) and refuses them to:

* tenant users (``users``, owners, promoted service accounts) and the service accounts of tenant namespaces,
  whatever rights they hold (a CREATE carrying the label too: only Enclave marks a binding as its own).

It lets through Enclave's own service accounts (the release namespace's, also skipped by the matchCondition),
``system:masters`` and the cluster's controllers (skipped by the matchCondition: the namespace controller and
the garbage collector clean up), ``administrators``, ``ignoreUserWithGroups`` and everyone else the service does
not treat as a tenant (cluster operators: RBAC decides for them). Someone a tenant owner bound ``admin`` to who
is no tenant user is not refused: Enclave knows no more about them than about any operator (docs/api.md).
"""

from __future__ import annotations

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.api.names import MANAGED_BY, TENANTS_MANAGER
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX


def validate(request: AdmissionRequest, state: State) -> Decision:
    if request.sub_resource:
        return Decision.allow()
    if request.labels.get(MANAGED_BY) != TENANTS_MANAGER and request.old_labels.get(MANAGED_BY) != TENANTS_MANAGER:
        return Decision.allow("NotManaged")
    username = request.username
    if state.namespace and username.startswith(f"{SERVICE_ACCOUNT_PREFIX}{state.namespace}:"):
        return Decision.allow("EnclaveComponent")
    subject = state.subject(username, request.groups)
    if not subject.tenant_subject:
        return Decision.allow("NotATenant")
    action = {"DELETE": "delete", "CREATE": "create"}.get(request.operation, "change")
    return Decision.deny(
        "ManagedRoleBinding",
        f"RoleBinding {request.namespace}/{request.name} is kept by Enclave ({MANAGED_BY}={TENANTS_MANAGER}): "
        f"{username} may not {action} it; owners and roles are changed on the Tenant (or TenantOwner), "
        "by whoever may edit it",
        tenant=state.tenancy.namespace_owner.get(request.namespace, ""),
    )
