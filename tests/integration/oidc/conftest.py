"""Fixtures for sign-in through OpenID Connect: one real Keycloak per test session, started only when these run.

Keycloak gets a CA of its own (a self-signed identity provider, the case ``idp-certificate-authority`` is for);
the realm comes from ``realm-enclave.json`` beside this file. How kube-apiserver trusts the identity provider is a
flag of its process: the modules that use the structured ``AuthenticationConfiguration`` share the package's
``plane`` (each starting its own Enclave stack on it, one module at a time); a module that needs other flags
(the legacy ``--oidc-*`` ones) defines a ``plane`` of its own.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from enclave_core.pki import CertificateAuthority
from enclave_testing.controlplane import ControlPlane
from enclave_testing.keycloak import Keycloak
from enclave_testing.stack import TenancyStack, start_tenancy

from .signin import REALM_FILE, TENANT_GROUP, Provider, structured_flags, trusting_plane


@pytest.fixture(scope="session")
def provider() -> Iterator[Provider]:
    workdir = Path(tempfile.mkdtemp(prefix="enclave-keycloak-"))
    keycloak = Keycloak(workdir, CertificateAuthority.generate("enclave-test-idp-ca")).start()
    try:
        realm = keycloak.import_realm(REALM_FILE)
        yield Provider(keycloak, realm)
    finally:
        keycloak.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="package")
def plane(provider: Provider) -> Iterator[ControlPlane]:
    """A control plane whose kube-apiserver trusts Keycloak through ``--authentication-config``."""
    with trusting_plane(provider, lambda directory: structured_flags(provider, directory)) as running:
        yield running


@pytest.fixture(scope="module")
def stack(plane: ControlPlane) -> Iterator[TenancyStack]:
    """Enclave's tenancy core on the package's plane, its users the prefixed Keycloak group; one per module."""
    running = start_tenancy(plane, users=[{"kind": "Group", "name": TENANT_GROUP}])
    try:
        yield running
    finally:
        running.close()
