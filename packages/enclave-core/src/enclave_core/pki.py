"""A small X.509 toolkit: a CA that issues serving and client certificates.

The TLS reconciler (webhook serving certificates, each component's client certificate) and the test control
plane (apiserver, clients) need the same three operations: make a CA, issue a leaf, read a PEM back. ECDSA P-256
keeps key generation in the microseconds, which matters when tests force short-lived certificates to exercise
renewal.

A component's client certificate names it twice: the subject CN (``enclave-admission``, for people reading logs
and ``openssl x509``) and a URI SAN (``spiffe://enclave.dev/component/enclave-admission``), which is what
publishers authorise by (:func:`component_of`). The URI is the identity because no other certificate the CA
signs carries one: the serving certificate's CN is a configurable Service name, which could spell a component.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from enclave_core.identity import COMPONENT_URI_PREFIX as COMPONENT_URI_PREFIX
from enclave_core.identity import component_named
from enclave_core.identity import component_uri as component_uri

# A small back-dating absorbs clock skew between the issuer and the verifier.
_BACKDATE = timedelta(minutes=5)


def _private_key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def not_after(self) -> datetime:
        return self.certificate.not_valid_after_utc

    @property
    def not_before(self) -> datetime:
        return self.certificate.not_valid_before_utc

    def remaining_fraction(self, now: datetime | None = None) -> float:
        """Share of the validity period still ahead: renewal triggers on this, not on a fixed duration."""
        now = now or datetime.now(UTC)
        total = (self.not_after - self.not_before).total_seconds()
        return max(0.0, (self.not_after - now).total_seconds() / total) if total > 0 else 0.0


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA able to issue leaves."""

    pair: KeyPair

    @classmethod
    def generate(cls, common_name: str, validity: timedelta = timedelta(days=3650)) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.now(UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(KeyPair(cert.public_bytes(serialization.Encoding.PEM), _private_key_pem(key)))

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        """Load an existing CA (kept across restarts so the bundle in webhook configurations stays valid)."""
        cert = x509.load_pem_x509_certificate(cert_pem)
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        if not constraints.ca:
            raise ValueError("the certificate is not a CA certificate")
        key = serialization.load_pem_private_key(key_pem, password=None)
        if key.public_key().public_numbers() != cert.public_key().public_numbers():  # type: ignore[union-attr]
            raise ValueError("the CA key does not match the CA certificate")
        return cls(KeyPair(cert_pem, key_pem))

    def issue(
        self,
        common_name: str,
        *,
        dns_names: list[str] | None = None,
        ip_addresses: list[str] | None = None,
        organizations: list[str] | None = None,
        uris: list[str] | None = None,
        server: bool = True,
        client: bool = False,
        validity: timedelta = timedelta(days=365),
    ) -> KeyPair:
        """Issue a leaf. Client certificates carry the Kubernetes user (CN) and groups (O)."""
        ca_cert = self.pair.certificate
        ca_key = serialization.load_pem_private_key(self.pair.key_pem, password=None)
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations or []]
        now = datetime.now(UTC)
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            # Back-date by a tenth of the validity at most: a fixed 5 minutes would dominate a short-lived
            # certificate and make it look almost expired from the start.
            .not_valid_before(max(now - min(_BACKDATE, validity / 10), ca_cert.not_valid_before_utc))
            .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
                critical=False,
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names or []]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses or []]
        sans += [x509.UniformResourceIdentifier(uri) for uri in uris or []]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _private_key_pem(key))


def issue_component_client(ca: CertificateAuthority, component: str, validity: timedelta) -> KeyPair:
    """The client certificate of ``component`` (``enclave-admission``...): clientAuth only, named by CN and URI."""
    return ca.issue(component, uris=[component_uri(component)], server=False, client=True, validity=validity)


def component_of(cert: x509.Certificate) -> str | None:
    """The component a client certificate identifies, or None: exactly one URI SAN under
    :data:`COMPONENT_URI_PREFIX`, and clientAuth among its usages (a serving certificate is no identity).

    The caller has already verified the chain (the TLS handshake did): this only reads what the CA put in it.
    """
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
        return None
    return component_named(sans.get_values_for_type(x509.UniformResourceIdentifier))


def signing_key_pair() -> tuple[bytes, bytes]:
    """A bare key pair (private PEM, public PEM), e.g. for service-account token signing."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _private_key_pem(key), public
