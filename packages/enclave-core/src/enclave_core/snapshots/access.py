"""Who may subscribe to which snapshot kind: the table every publisher authorises a stream by.

Mutual TLS proves only that a subscriber holds *a* certificate of the service CA. Each component has its own
(enclave-config issues one per component, :func:`enclave_core.pki.issue_component_client`), so a publisher knows
which component is asking and answers only the kinds that component consumes: a leaked or compromised
enclave-pools key reads the configuration, not every tenant's rules. The table is explicit and closed: a kind
missing from it is refused to everyone, so a new kind is published to nobody until someone decides who reads it
(and docs/architecture.md's table says so too).

Pure: no I/O; :class:`enclave_core.snapshots.server.HubServicer` applies it to each ``Watch``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from enclave_core.snapshots.configuration import CONFIG_KIND
from enclave_core.snapshots.globalquotas import GLOBALQUOTAS_KIND
from enclave_core.snapshots.pools import POOLS_KIND
from enclave_core.snapshots.quotas import QUOTAS_KIND
from enclave_core.snapshots.replication import REPLICATION_KIND
from enclave_core.snapshots.rules import RULES_KIND
from enclave_core.snapshots.tenancy import TENANCY_KIND

ADMISSION: Final = "enclave-admission"
TENANTS: Final = "enclave-tenants"
QUOTAS: Final = "enclave-quotas"
GLOBALQUOTAS: Final = "enclave-globalquotas"
POOLS: Final = "enclave-pools"
REPLICATION: Final = "enclave-replication"
PROXY: Final = "enclave-proxy"

_CONFIGURED = frozenset({ADMISSION, TENANTS, QUOTAS, GLOBALQUOTAS, POOLS, REPLICATION, PROXY})
"""Every component that follows enclave-config's effective configuration."""

SUBSCRIBERS: Final[Mapping[str, frozenset[str]]] = {
    CONFIG_KIND: _CONFIGURED,
    # the proxy: each tenant's namespaces, node selector, spec.proxy and the classes its rules allow
    TENANCY_KIND: frozenset({ADMISSION, PROXY}),
    RULES_KIND: frozenset({ADMISSION}),
    QUOTAS_KIND: frozenset({ADMISSION}),
    GLOBALQUOTAS_KIND: frozenset({ADMISSION}),
    POOLS_KIND: frozenset({ADMISSION}),
    REPLICATION_KIND: frozenset({ADMISSION}),
}
"""Snapshot kind -> the components that may subscribe to it."""

CLIENT_COMPONENTS: Final = tuple(sorted(set().union(*SUBSCRIBERS.values())))
"""The components that subscribe to something, hence get a client certificate (enclave-config subscribes to
nothing: it has none)."""


def refusal(component: str | None, kinds: Iterable[str]) -> str:
    """Why ``component`` may not watch ``kinds`` (empty: it may). ``None`` is a certificate that names no
    component (a serving certificate, or one of an older release)."""
    if component is None:
        return "the client certificate names no Enclave component (a URI SAN spiffe://enclave.dev/component/...)"
    denied = sorted(kind for kind in set(kinds) if component not in SUBSCRIBERS.get(kind, frozenset()))
    if denied:
        return f"{component} may not subscribe to {', '.join(denied)}"
    return ""


def readable(component: str) -> list[str]:
    """Every kind ``component`` may watch: what a request naming no kinds ("all of them") is narrowed to."""
    return sorted(kind for kind, components in SUBSCRIBERS.items() if component in components)
