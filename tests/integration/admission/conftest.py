"""Fixtures for the admission tests: one Enclave (config, admission, test TenantService) per module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from enclave_testing.controlplane import ControlPlane

from .harness import ADMINS, Enclave, namespace_rights, start_enclave, stop_enclave


@pytest.fixture(scope="module")
def enclave(
    control_plane: ControlPlane, kube: Any, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> Iterator[Enclave]:
    subjects = [
        {"kind": "Group", "name": "enclave.dev", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "Group", "name": ADMINS, "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "Group", "name": "system:serviceaccounts", "apiGroup": "rbac.authorization.k8s.io"},
    ]
    with namespace_rights(kube, "enclave-admission-test-everything", subjects):
        running = start_enclave(
            control_plane,
            kube,
            impersonate,
            spec={"protectedNamespaceRegex": "-protected$", "allowServiceAccountPromotion": True},
        )
        try:
            yield running
        finally:
            stop_enclave(running)
