"""The webhook TLS Secret: keep the CA, renew the serving certificate well before it expires (pure planning).

The CA outlives serving certificates so the caBundle in webhook configurations rarely changes; a serving
certificate is re-issued when a third of its validity is left, when it no longer covers the service's names,
or when it was not signed by the current CA. Admission replicas re-read the mounted files, so a renewal
reaches them without a restart.

The serving leaf is for serving only (serverAuth: the webhook and gRPC listeners). What a subscriber presents
to a gRPC publisher is its component's own client certificate, one Secret per component
(:func:`client_secret_name`, planned by :func:`plan_client`): clientAuth only, naming the component, so a
publisher can tell which component asks and a leaked key speaks for one component, not all. A serving
certificate of an older release, which also carried clientAuth (every pod held that one client identity), is
re-issued (``ServingCertificateUsageChanged``). Client certificates are renewed by the same rules as the serving
one: a third of the validity left, not from the current CA, or no longer naming their component.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from enclave_core.pki import CertificateAuthority, KeyPair, component_of, issue_component_client

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
RENEW_WHEN_LEFT = 1 / 3


@dataclass(frozen=True)
class TlsPlan:
    """What the Secret should hold, and why it changes (empty reason: unchanged)."""

    data: dict[str, bytes]
    reason: str

    @property
    def ca_pem(self) -> bytes:
        return self.data[CA_CERT]


def service_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def decode(secret: dict[str, object] | None) -> dict[str, bytes]:
    data = (secret or {}).get("data") or {}
    assert isinstance(data, dict)
    return {key: base64.b64decode(value) for key, value in data.items()}


def _load_ca(data: dict[str, bytes], now: datetime) -> CertificateAuthority | None:
    try:
        ca = CertificateAuthority.from_pem(data[CA_CERT], data[CA_KEY])
    except (KeyError, ValueError):
        return None
    return ca if ca.pair.not_after - now > timedelta(days=30) else None


def _leaf(data: dict[str, bytes], ca: CertificateAuthority, now: datetime) -> tuple[x509.Certificate | None, str]:
    """The Secret's leaf certificate when it may stay as far as any leaf goes; else None and why not
    (``Missing``, ``NotFromCA``, ``Expiring``: the caller prefixes what kind of certificate it is)."""
    try:
        pair = KeyPair(data[TLS_CERT], data[TLS_KEY])
        cert = pair.certificate
    except (KeyError, ValueError):
        return None, "Missing"
    try:
        cert.verify_directly_issued_by(ca.pair.certificate)
    except Exception:
        return None, "NotFromCA"
    if pair.remaining_fraction(now) < RENEW_WHEN_LEFT:
        return None, "Expiring"
    return cert, ""


def _serving_ok(data: dict[str, bytes], ca: CertificateAuthority, hosts: list[str], now: datetime) -> str:
    """Empty when the serving certificate may stay; otherwise why it must be renewed."""
    cert, why = _leaf(data, ca, now)
    if cert is None:
        return f"ServingCertificate{why}"
    try:
        usages = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        usages = set()
    if usages != {ExtendedKeyUsageOID.SERVER_AUTH}:
        return "ServingCertificateUsageChanged"
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "ServingCertificateNamesChanged"
    present = set(sans.get_values_for_type(x509.DNSName)) | {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    if not set(hosts) <= present:
        return "ServingCertificateNamesChanged"
    return ""


def plan(
    existing: dict[str, bytes],
    *,
    dns_names: list[str],
    ip_addresses: list[str],
    validity: timedelta,
    now: datetime | None = None,
) -> TlsPlan:
    """Decide the Secret's content from what it holds now."""
    now = now or datetime.now(UTC)
    ca = _load_ca(existing, now)
    reason = ""
    data = dict(existing)
    if ca is None:
        ca = CertificateAuthority.generate("enclave-webhook-ca")
        data[CA_CERT], data[CA_KEY] = ca.pair.cert_pem, ca.pair.key_pem
        reason = "CertificateAuthorityCreated"
    why = _serving_ok(data, ca, dns_names + ip_addresses, now)
    if why or reason:
        leaf = ca.issue(dns_names[0], dns_names=dns_names, ip_addresses=ip_addresses, validity=validity)
        data[TLS_CERT], data[TLS_KEY] = leaf.cert_pem, leaf.key_pem
        reason = reason or why
    return TlsPlan(data, reason)


def client_secret_name(tls_secret_name: str, component: str) -> str:
    """``enclave-tls-client-admission`` for ``enclave-admission``: beside the serving Secret, one per component."""
    return f"{tls_secret_name}-client-{component.removeprefix('enclave-')}"


def _client_ok(data: dict[str, bytes], ca: CertificateAuthority, component: str, now: datetime) -> str:
    """Empty when the component's client certificate may stay; otherwise why it must be re-issued."""
    cert, why = _leaf(data, ca, now)
    if cert is None:
        return f"ClientCertificate{why}"
    if component_of(cert) != component:
        return "ClientCertificateIdentityChanged"
    return ""


def plan_client(
    existing: dict[str, bytes],
    serving: dict[str, bytes],
    component: str,
    *,
    validity: timedelta,
    now: datetime | None = None,
) -> TlsPlan:
    """Decide ``component``'s client Secret from what it holds and the serving Secret's plan (whose CA signs it).

    The Secret carries ``ca.crt`` too (never ``ca.key``): it is all a subscriber needs, so a component that
    only subscribes mounts no serving key at all.
    """
    now = now or datetime.now(UTC)
    ca = CertificateAuthority.from_pem(serving[CA_CERT], serving[CA_KEY])
    data = {key: value for key, value in existing.items() if key in (TLS_CERT, TLS_KEY, CA_CERT)}
    reason = _client_ok(data, ca, component, now)
    if reason:
        leaf = issue_component_client(ca, component, validity)
        data[TLS_CERT], data[TLS_KEY] = leaf.cert_pem, leaf.key_pem
    if data.get(CA_CERT) != ca.pair.cert_pem:
        data[CA_CERT] = ca.pair.cert_pem
        reason = reason or "CertificateAuthorityChanged"
    if set(existing) - set(data):
        reason = reason or "UnexpectedKeys"
    return TlsPlan(data, reason)


def next_check(data: dict[str, bytes], now: datetime | None = None) -> float:
    """Seconds until the Secret's certificate (``tls.crt``) reaches its renewal point (at least 1s)."""
    now = now or datetime.now(UTC)
    try:
        pair = KeyPair(data[TLS_CERT], data[TLS_KEY])
    except KeyError:
        return 1.0
    total = (pair.not_after - pair.not_before).total_seconds()
    renew_at = pair.not_after - timedelta(seconds=total * RENEW_WHEN_LEFT)
    return max(1.0, (renew_at - now).total_seconds())
