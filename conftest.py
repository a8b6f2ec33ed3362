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
