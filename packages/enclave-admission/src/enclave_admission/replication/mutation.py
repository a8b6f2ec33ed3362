"""Deprecated settings (``/replication/mutate``): ``settings`` and ``pruningOnDelete`` become per-block policies.

On CREATE and UPDATE of a GlobalTenantResource or TenantResource, every block without ``policy`` gets the one
:func:`enclave_core.api.replication.effective_policy` derives (``settings.adopt`` -> creation Merge,
``settings.force`` -> force, ``pruningOnDelete: false`` -> deletion Orphan). Blocks with a policy are left
alone, so the conversion happens once and a later edit of the deprecated fields does not rewrite policies
written since. The controller applies the same function, so an object admitted while this hook was away
behaves the same.
"""

from __future__ import annotations

from pydantic import ValidationError

from enclave_admission.review import JSON, AdmissionRequest, Decision, pointer
from enclave_admission.state import State
from enclave_core.api.replication import TenantResourceSpec, effective_policy


def mutate(request: AdmissionRequest, state: State) -> Decision:
    del state  # decided from the object alone
    if request.operation not in ("CREATE", "UPDATE") or not request.obj:
        return Decision.allow()
    raw = request.obj.get("spec")
    if not isinstance(raw, dict) or not isinstance(raw.get("resources"), list):
        return Decision.allow()
    try:
        spec = TenantResourceSpec.model_validate(
            {k: v for k, v in raw.items() if k in ("resources", "settings", "pruningOnDelete")}
        )
    except ValidationError:
        return Decision.allow()  # the schema refuses it; nothing to convert
    patch: list[JSON] = [
        {
            "op": "add",
            "path": pointer("spec", "resources", str(index), "policy"),
            "value": effective_policy(block, spec).to_k8s(),
        }
        for index, block in enumerate(spec.resources)
        if block.policy is None
    ]
    if not patch:
        return Decision.allow()
    return Decision.mutate("DeprecatedSettingsConverted", patch)
