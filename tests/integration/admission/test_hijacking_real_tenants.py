"""The hijacking table again, with the real enclave-tenants process behind admission instead of the test's
TenantService: the snapshot admission decides from is the one the controller compiles from real Tenants and
namespaces, so what the table proves holds for the shipped pair, not only for a hand-built snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from enclave_testing.controlplane import ControlPlane

from .harness import Enclave, namespace_rights, start_enclave, stop_enclave
from .test_hijacking import (  # noqa: F401 - collected here again, against this module's `enclave`
    scene,
    test_cannot_adopt_an_unowned_namespace,
    test_cannot_delete_namespaces_outside_own_tenants,
    test_cannot_drop_owner_references,
    test_cannot_drop_ownership_of_own_namespace,
    test_cannot_move_own_namespace_to_another_tenant,
    test_cannot_take_another_tenants_namespace,
    test_cannot_touch_system_namespaces,
    test_create_with_a_forged_owner_reference_lands_in_own_tenant,
    test_server_side_apply_without_the_label_keeps_ownership,
)


@pytest.fixture(scope="module")
def enclave(
    control_plane: ControlPlane, kube: Any, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> Iterator[Enclave]:
    """config, enclave-tenants and admission as their own processes; no test double anywhere."""
    subjects = [{"kind": "Group", "name": "enclave.dev", "apiGroup": "rbac.authorization.k8s.io"}]
    with namespace_rights(kube, "enclave-admission-test-hijacking-real", subjects):
        running = start_enclave(control_plane, kube, impersonate, real_tenants=True)
        try:
            yield running
        finally:
            stop_enclave(running)
