"""What the controllers cache of the kinds several of them watch: one projection per kind, shared.

At 1,000 tenants x 10 namespaces the namespace, Tenant and RuleStatus caches are most of a controller's heap,
and a co-located host (``enclave_core.runtime.host``) held one copy per hosted component. Each projection
here keeps the union of what its readers read, so that every controller watching the kind passes the *same*
function as its informer's ``transform``: in a host that makes their informers one
(:mod:`enclave_core.kube.shared` keys a shared informer by path, selectors and transform), and a component
alone caches no more than a few fields it does not read. The objects are built with
:func:`~enclave_core.kube.informer.share` (a tenant's namespaces hold their labels, owner reference and field
sets once) and must never be mutated by a reader.

Readers, by kind (keep this list current when a controller starts reading another field):

- namespaces: every controller reads ``metadata.name``, ``labels`` and ``deletionTimestamp`` and
  ``status.phase`` (globalquotas, pools, quotas, replication: selectors, the tenant label, terminating);
  enclave-tenants also the rest of ``metadata`` (owner references, annotations, its own apply entries in
  ``managedFields`` to release what it applied: :mod:`enclave_core.kube.managedfields`);
- Tenants: the whole object but ``managedFields`` (enclave-tenants, globalquotas, replication);
- RuleStatuses: the whole object but ``managedFields`` and ``creationTimestamp`` (enclave-tenants;
  globalquotas reads their ``spec[].quota``).
"""

from __future__ import annotations

from enclave_core.api.names import TENANTS_MANAGER
from enclave_core.kube.informer import keep_managed_fields, share
from enclave_core.kube.rest import JSON

__all__ = ["ENTRY_FIELDS", "namespace", "rule_status", "tenant"]

ENTRY_FIELDS = ("manager", "operation", "subresource", "fieldsV1")
"""What :mod:`enclave_core.kube.managedfields` reads of a managedFields entry (not its time or format)."""


def namespace(obj: JSON) -> JSON:
    """Namespaces as the controllers read them: metadata with enclave-tenants' own apply entries, and the phase
    (``spec.finalizers`` and the status conditions are never read). What a tenant's namespaces have in common
    (labels but the name, the owner reference, enclave-tenants' field sets) is held once."""
    meta = obj.get("metadata") or {}
    entries = [
        {key: entry[key] for key in ENTRY_FIELDS if key in entry}
        for entry in meta.get("managedFields") or []
        if entry.get("manager") == TENANTS_MANAGER
    ]
    kept = {key: value for key, value in meta.items() if key != "managedFields"}
    if entries:
        kept["managedFields"] = entries
    phase = (obj.get("status") or {}).get("phase")
    trimmed: JSON = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": kept}
    trimmed["status"] = {"phase": phase} if phase else {}
    shared: JSON = share(trimmed)
    return shared


def rule_status(obj: JSON) -> JSON:
    """RuleStatuses without managedFields or creation time; the rest (spec, status, generation, uid for Events)
    is read. Their conditions and rules repeat across a tenant's namespaces and are held once."""
    meta = obj.get("metadata") or {}
    kept = {key: value for key, value in meta.items() if key not in ("managedFields", "creationTimestamp")}
    shared: JSON = share({**obj, "metadata": kept})
    return shared


tenant = keep_managed_fields()
"""Tenants without managedFields (no reader reads them), keys and short strings interned."""
