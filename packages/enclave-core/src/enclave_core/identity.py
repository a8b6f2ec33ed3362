"""A component's identity in a certificate: the one URI SAN ``spiffe://enclave.dev/component/<component>``.

Apart from :mod:`enclave_core.pki` because reading an identity needs no X.509 library: a publisher gets the
verified peer's URI SANs from gRPC's auth context (``peer_uri``), so the six processes that serve snapshot
streams do not load ``cryptography`` (about 12 MB of resident memory each, docs/decisions/0007) to read one
string. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

COMPONENT_URI_PREFIX = "spiffe://enclave.dev/component/"
"""A component's client certificate carries the URI SAN ``<prefix><component>``, e.g. ``...component/enclave-admission``."""


def component_uri(component: str) -> str:
    return f"{COMPONENT_URI_PREFIX}{component}"


def component_named(uris: Iterable[str]) -> str | None:
    """The component a certificate's URI SANs name: exactly one under :data:`COMPONENT_URI_PREFIX`, one path
    segment, not empty; otherwise None (two identities are none).

    Whether the certificate may act as a client at all (clientAuth among its usages) is the caller's part: the
    TLS handshake checks it for a publisher, :func:`enclave_core.pki.component_of` for a certificate in hand.
    """
    named = [uri[len(COMPONENT_URI_PREFIX) :] for uri in uris if uri.startswith(COMPONENT_URI_PREFIX)]
    if len(named) != 1 or not named[0] or "/" in named[0]:
        return None
    return named[0]
