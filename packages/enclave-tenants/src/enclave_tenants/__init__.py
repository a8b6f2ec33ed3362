"""enclave-tenants: the controller of Tenants and TenantOwners.

It keeps every tenant namespace carrying what its Tenant says (tenant label, additional metadata, the
PodNodeSelector annotation, an owner reference, one RoleBinding per owner and cluster role), reports Tenant and
TenantOwner status, and streams the compiled ``Tenancy`` snapshot admission decides from over
``TenantService``.

Layout: ``owners``, ``bindings``, ``namespaces``, ``status`` and ``plan`` are pure (no I/O, unit tested);
``controller`` turns informer state into a plan and, on the Lease holder only, into writes.
"""
