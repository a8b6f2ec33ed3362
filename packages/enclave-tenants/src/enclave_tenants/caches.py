"""What the tenants controller caches, and what a change in those caches means.

The controller reads only informer caches (a steady state costs no API call). This module holds the collections
it watches, how each cached object is trimmed (at 10,000 namespaces the caches are most of the process's memory:
only what is read is kept, and what a tenant's objects have in common is held once), and the informer handlers
that turn a change into hints for the write loop (:mod:`enclave_tenants.work`) and triggers for both loops.

``Caches`` is a base of :class:`enclave_tenants.controller.TenantsController`, whose ``__init__`` sets the state
declared here.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from enclave_core import GROUP_VERSION
from enclave_core.kube import projections
from enclave_core.kube.informer import Informer, share
from enclave_core.kube.rest import JSON
from enclave_core.runtime.loops import ControllerLoop
from enclave_core.snapshots.configuration import EffectiveConfiguration
from enclave_tenants import work
from enclave_tenants.native.controller import NativePolicies
from enclave_tenants.policy import Policy

log = logging.getLogger(__name__)

TENANTS_PATH = f"/apis/{GROUP_VERSION}/tenants"
OWNERS_PATH = f"/apis/{GROUP_VERSION}/tenantowners"
BINDINGS_PATH = "/apis/rbac.authorization.k8s.io/v1/rolebindings"
RULE_STATUSES_PATH = f"/apis/{GROUP_VERSION}/rulestatuses"
VOLUMES_PATH = "/api/v1/persistentvolumes"
BUDGETS_PATH = "/apis/policy/v1/poddisruptionbudgets"


class Caches:
    """The informer handlers: hints for the write loop, triggers for both loops."""

    tenants: Informer
    owners: Informer
    namespaces: Informer
    bindings: Informer
    policy: Policy
    configuration: asyncio.Event
    loop: ControllerLoop
    _dirty: work.Dirty
    _signatures: dict[str, tuple[object, ...]]
    _ledgers_due: bool
    _plan_stale: bool
    _binding_names: dict[str, tuple[str, ...]]
    native: NativePolicies

    def _ledger_changed(self, _key: str) -> None:
        """The ledger client has taken the copy (``LedgerClient.informer``); the namespace quotas' ledgers are
        looked at again."""
        self._ledgers_due = True
        self._replan()

    def _publish_only(self, _key: str) -> None:
        """PersistentVolumes and PodDisruptionBudgets only change the Rules snapshot: nothing to write."""
        self.loop.republish()

    def _replan(self) -> None:
        self._plan_stale = True
        self._changed()

    def _spec_changed(self, kind: str, name: str, obj: JSON | None) -> bool:
        """Whether the Tenant or TenantOwner changed outside its status (our status writes come back too)."""
        key = f"{kind}/{name}"
        signature = work.spec_signature(obj)
        if self._signatures.get(key) == signature:
            return False
        if obj is None:
            self._signatures.pop(key, None)
        else:
            self._signatures[key] = signature
        return True

    def _tenant_changed(self, name: str) -> None:
        if self._spec_changed("Tenant", name, self.tenants.get(name)):
            self._dirty.tenants.add(name)
            self._dirty.owners = True
            self._ledgers_due = True
            self._replan()
        else:
            self._dirty.statuses.add(name)
            self.loop.again()

    def _owner_changed(self, name: str) -> None:
        if self._spec_changed("TenantOwner", name, self.owners.get(name)):
            self._dirty.mark_everything()  # an owner may join any number of tenants by its labels
            self._replan()
        else:
            self._dirty.owners = True
            self.loop.again()

    def _namespace_changed(self, name: str) -> None:
        self.native.changed()
        self._dirty.namespaces.add(name)
        self._dirty.rules.add(name)
        self._ledgers_due = True
        self._replan()

    def _binding_changed(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        # Interned: the index keeps them, and 20,000 fresh copies of a few distinct names were ~1 MB.
        namespace, name = sys.intern(namespace), sys.intern(name)
        self._index_binding(namespace, name)
        self._dirty.namespaces.add(namespace)
        self.loop.again()

    def _index_binding(self, namespace: str, name: str) -> None:
        """Keep ``_binding_names`` (namespace -> names of our cached RoleBindings) as the cache is."""
        names = self._binding_names.get(namespace, ())
        cached = f"{namespace}/{name}" in self.bindings.items
        if cached == (name in names):
            return
        # Tuples, not sets: a namespace has a few names, and 10,000 sets were ~4 MB.
        updated = (*names, name) if cached else tuple(other for other in names if other != name)
        if updated:
            self._binding_names[namespace] = updated
        else:
            del self._binding_names[namespace]

    def _rule_status_changed(self, key: str) -> None:
        namespace = key.partition("/")[0]
        self.native.changed()
        self._dirty.namespaces.add(namespace)
        self._dirty.rules.add(namespace)
        self._changed()

    def _account_changed(self, key: str) -> None:
        self._dirty.accounts.add(key.partition("/")[0])
        self._replan()

    def _changed(self, _key: str = "") -> None:
        self.loop.changed()

    def set_leading(self, leading: bool) -> None:
        self.native.set_leading(leading)
        self._dirty.mark_everything()
        self.loop.set_leading(leading)

    def configure(self, config: EffectiveConfiguration) -> None:
        """The policy enclave-config's configuration says (the runtime opens the gate after)."""
        policy = Policy.from_configuration(config)
        if policy != self.policy or not self.configuration.is_set():
            log.info("configuration received", extra={"configuration": config.name, "generation": config.generation})
        self.policy = policy
        self.native.configure(policy.rules_engine, policy.ignored_groups)
        self._dirty.mark_everything()
        self._replan()


_namespace_trim = projections.namespace
"""Namespaces as every controller caches them (one projection for all: a host shares the cache)."""


def _binding_trim(obj: JSON) -> JSON:
    """Our RoleBindings as :func:`bindings.drifted` compares them: name, labels, roleRef and subjects (and the
    resourceVersion that tells a watch echo). 20,000 of them at 10,000 namespaces; a tenant's hold the same
    labels, roleRef and subjects, which :func:`share` keeps once."""
    meta = obj.get("metadata") or {}
    trimmed: JSON = {
        "metadata": {key: meta[key] for key in _BINDING_METADATA if key in meta},
        "roleRef": obj.get("roleRef"),
        "subjects": obj.get("subjects") or [],
    }
    shared: JSON = share(trimmed)
    return shared


_BINDING_METADATA = ("name", "namespace", "resourceVersion", "labels", "deletionTimestamp")


_rule_status_trim = projections.rule_status
"""RuleStatuses as every controller caches them (enclave-globalquotas reads them too)."""


def _volume_trim(obj: JSON) -> JSON:
    """PersistentVolumes: only their name and labels go into the Rules snapshot."""
    meta = obj.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}}}
