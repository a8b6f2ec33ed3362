"""One quota Enclave (config, enclave-quotas, three admission replicas behind a balancer) per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from enclave_testing.controlplane import ControlPlane

from .harness import QuotaEnclave, quota_enclave


@pytest.fixture(scope="module")
def enclave(control_plane: ControlPlane, kube: Any, enclave_crds: list[str]) -> Iterator[QuotaEnclave]:
    with quota_enclave(control_plane, kube, replicas=3) as running:
        yield running
