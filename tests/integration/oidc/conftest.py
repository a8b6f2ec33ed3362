"""Fixtures for sign-in through OpenID Connect: one real Keycloak per test session, started only when these run.

Keycloak gets a CA of its own (a self-signed identity provider, the case ``idp-certificate-authority`` is for);
the realm comes from ``realm-enclave.json`` beside this file. Each test module starts its own control plane,
because how kube-apiserver trusts the identity provider is a flag of its process.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from enclave_core.pki import CertificateAuthority
from enclave_testing.keycloak import Keycloak

from .signin import REALM_FILE, Provider


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
