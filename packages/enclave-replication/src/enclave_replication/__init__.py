"""enclave-replication: the controller of GlobalTenantResources and TenantResources.

It replicates objects (raw manifests, copies of existing objects, rendered templates) into the namespaces of
selected tenants, keeps them there by server-side apply, removes or orphans them when they are no longer
wanted, and streams which objects it manages over ``ReplicationService`` so admission can protect them.

Layout: ``names``, ``templates``, ``targets``, ``plan`` and ``status`` are pure (no I/O, unit tested; ``plan``
reads sources and renders templates through small protocols); ``sandbox`` runs templates in budgeted worker
processes (``sandbox_worker``); ``discovery`` maps kinds to resources; ``controller`` turns informer state into
a plan and, on the Lease holder only, into writes made as the acting identity.
"""
