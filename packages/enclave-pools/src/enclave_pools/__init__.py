"""enclave-pools: ResourcePools and ResourcePoolClaims.

A pool provisions one ResourceQuota into every namespace its selectors match, with ``hard`` = the pool's
``defaults`` plus the claims of that namespace it has bound. Claims bind oldest first while the pool has room;
the pool's ``status.claims`` is the ledger of bindings, committed with the pool's resourceVersion by the one
Lease holder. Every replica publishes the ``ResourcePools`` snapshot admission decides claims from.

:mod:`.model` is what the plan reads and says (claims, recorded bindings, verdicts, pool plans), :mod:`.plan`
binds claims and compiles the snapshot, :mod:`.resourcequotas` is the ResourceQuota each pool provisions (its
``hard``, drift, staleness, each claim's ``used``), :mod:`.status` the pool and claim statuses, and
:mod:`.controller` the loops that watch, write and publish.
"""
