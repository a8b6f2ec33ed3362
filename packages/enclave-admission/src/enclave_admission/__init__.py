"""Enclave admission: the stateless HTTPS webhook server.

A review's path: :mod:`.listener` accepts and bounds connections, :mod:`.connection` speaks HTTP/1.1 on each,
:mod:`.server` answers (readiness, freshness, metrics, the log line, :mod:`.events`), and the handler
:data:`.routes.ROUTES` names for the path is the whole decision, read from :mod:`.state` (the latest snapshots)
and returned as a :class:`.review.Decision`. Hooks that hold quota write their ledger reservations through
:mod:`.reservation`. One package per area decides: ``namespaces``, ``serviceaccounts``, ``rolebindings``,
``nodes``, ``tenants``, ``rules``, ``configuration``, ``quotas``, ``globalquotas``, ``pools``, ``replication``.
Beside them: :mod:`.defaults` (the default webhooks), :mod:`.conversion` (``/convert``), :mod:`.certificates`
(the serving certificate), :mod:`.limits` (the connection-limit flags), :mod:`.metadata` (label and owner
reference helpers); ``__main__`` wires them into the process.
"""
