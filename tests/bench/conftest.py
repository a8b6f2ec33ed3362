"""What the benchmarks share: one Enclave for the admission and rules benchmarks, started once per session (a
fixture shared across modules has to live here: pytest gives a fixture imported into a second module a second
instance).

Left out of mypy (``pyproject.toml``): mypy maps every directory without ``__init__.py`` to top-level modules, and
``conftest`` is taken by enclave-admission's tests. The harness it calls is checked where it is defined.
"""

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
