"""enclave-tenants: the controller of Tenants and TenantOwners.

It keeps every tenant namespace carrying what its Tenant says (tenant label, additional metadata, the
PodNodeSelector annotation, an owner reference, one RoleBinding per owner and cluster role), reports Tenant and
TenantOwner status, and streams the compiled ``Tenancy`` snapshot admission decides from over
``TenantService``.

Modules:

* pure (no I/O, unit tested): ``owners`` (effective owners), ``bindings`` (RoleBindings), ``namespaces``
  (namespace metadata), ``status`` (Tenant and TenantOwner status), ``rules`` (each namespace's compiled rules
  and RuleStatus), ``ledgers`` (namespace-quota ledger names), ``policy`` (what the configuration says),
  ``plan`` (all of it, from the caches), ``work`` (where the write loop may find work);
* ``managed`` puts rules' managed metadata on existing objects;
* the controller, in five parts: ``controller`` (informers, the snapshot loop, the write loop and its namespace
  writes), ``caches`` (what is watched, how it is trimmed, what a change means), ``reporting`` (status, Events,
  RuleStatus, managed metadata after each round), ``namespace_quota`` (the tenants' namespace-quota ledgers)
  and ``metrics``.
"""
