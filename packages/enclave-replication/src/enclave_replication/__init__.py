"""enclave-replication: the controller of GlobalTenantResources and TenantResources.

It replicates objects (raw manifests, copies of existing objects, rendered templates) into the namespaces of
selected tenants, keeps them there by server-side apply, removes or orphans them when they are no longer
wanted, and streams which objects it manages over ``ReplicationService`` so admission can protect them.

Modules:

* pure (no I/O, unit tested): ``names`` (keys, labels, annotations), ``templates``, ``targets``, ``plan``
  (reads sources and renders templates through small protocols), ``status``, ``adoption`` (what
  ``creation: Merge`` may take);
* ``sandbox`` runs templates in budgeted worker processes (``sandbox_worker``);
* ``discovery`` maps kinds to resources; ``access`` asks whether the controller may watch a collection;
  ``acting`` makes requests as the acting identity;
* the controller, in four parts: ``controller`` (the work queue, the protection snapshot, one reconcile, the
  finalizer and status), ``watches`` (what wakes a reconcile, the informers of managed objects and sources),
  ``identity`` (who a replication object acts as, the ``impersonation.endpoint`` client) and ``apply``
  (compare with the cache, dry-run, apply, prune).
"""
