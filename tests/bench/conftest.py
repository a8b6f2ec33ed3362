"""Fixtures shared by the benchmarks: one Enclave for the admission and rules benchmarks, started once per session
(each starting its own cost the smoke run of the default ``tox`` a stack's start-up)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from admission.harness import Enclave, namespace_rights, start_enclave, stop_enclave


@pytest.fixture(scope="session")
def bench_enclave(
    control_plane: Any, kube: Any, impersonate: Callable[..., Any], enclave_crds: list[str]
) -> Iterator[Enclave]:
    """config, tenants and admission with the default webhooks; each benchmark puts back what it switches off."""
    subjects = [{"kind": "Group", "name": "enclave.dev", "apiGroup": "rbac.authorization.k8s.io"}]
    with namespace_rights(kube, "enclave-bench", subjects):
        # the production default resync; the tests use 5 s to see their own changes quickly
        running = start_enclave(control_plane, kube, impersonate, spec={}, config_args=["--resync=60s"])
        try:
            yield running
        finally:
            stop_enclave(running)
