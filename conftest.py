"""Test layers by directory, so no test file has to remember to say which layer it is in.

Everything under ``tests/`` is ``integration`` (it starts a control plane or component processes, or checks what
they serve); ``tests/bench`` is ``bench`` as well. The packages' own ``tests/`` are unit tests: plain Python, no
process started. ``pytest -m "not integration"`` (``tox -e unit``) runs only those; ``tox`` runs every layer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent / "tests"
BENCH = TESTS / "bench"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by these marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.resolve()
        if path.is_relative_to(TESTS):
            item.add_marker(pytest.mark.integration)
        if path.is_relative_to(BENCH):
            item.add_marker(pytest.mark.bench)


SHARED_SCOPES = {
    "tests/security/": "tests/security",
    "tests/integration/proxy/": "tests/integration/proxy",
    "tests/integration/oidc/": "tests/integration/oidc",
    "tests/bench/test_admission_bench.py": "tests/bench/bench_enclave",
    "tests/bench/test_rules_bench.py": "tests/bench/bench_enclave",
}
"""Modules that share one expensive thing per process (the ``fence`` and ``proxied`` stacks of
:mod:`enclave_testing.shared`, the oidc suite's Keycloak, the benchmarks' ``bench_enclave``): under ``pytest -n``
each group goes to one worker whole, so it starts once, as in a serial run."""


def _scope(nodeid: str) -> str:
    """The unit ``pytest -n`` hands a worker: a shared group whole, otherwise a test module (its module-scoped
    stack starts once), a package's unit tests by package."""
    path = nodeid.split("::", 1)[0]
    for prefix, group in SHARED_SCOPES.items():
        if path.startswith(prefix):
            return group
    if path.startswith("packages/"):
        return "/".join(path.split("/", 2)[:2])
    return path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under ``pytest -n N`` (opt-in: on two cores the workers starve each other, docs/benchmarks.md), each worker a
    session with its own control plane; the scopes keep shared stacks on one worker so each starts once."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return SharedScopeScheduling(config, log)
