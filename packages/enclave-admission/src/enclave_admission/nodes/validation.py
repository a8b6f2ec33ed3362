"""Node validation (``/nodes``, off by default): forbidden node metadata.

Tenant owners may be granted patch rights on the nodes their tenant's node selector picks (to label them for
their own scheduling). ``spec.nodeMetadata`` names labels and annotations they must not add, change or remove
there (exact keys or a regular expression), typically the keys the node selectors themselves use.
"""

from __future__ import annotations

from enclave_admission.metadata import changed_keys
from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import Role, State


def validate(request: AdmissionRequest, state: State) -> Decision:
    subject = state.subject(request.username, request.groups)
    if subject.role is not Role.TENANT_USER:
        return Decision.allow("NotATenantUser")
    if request.operation != "UPDATE" or request.obj is None:
        # The hook registers UPDATE of nodes and nodes/status only: anything else is forged or new.
        return Decision.deny(
            "UnknownOperation", f"operation {request.operation!r} on node {request.name!r} is not one Enclave decides"
        )
    for what, old, new, forbidden in (
        ("label", request.old_labels, request.labels, state.node_labels),
        ("annotation", request.old_annotations, request.annotations, state.node_annotations),
    ):
        for key in changed_keys(old, new):
            why = forbidden.refuses(key)
            if why:
                return Decision.deny(
                    "ForbiddenNodeMetadata",
                    f"node {request.name!r}: {what} {why} (spec.nodeMetadata); tenant users cannot set it",
                )
    return Decision.allow()
