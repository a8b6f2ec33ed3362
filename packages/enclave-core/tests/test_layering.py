"""Components never import each other, and the shared library imports no component.

They meet only in protos/ (gRPC snapshots) and in the cluster (ledgers); an import across would make two
separately deployable processes secretly one. (The test-support package may use component helpers, and so
may the tools: the ``enclave`` command line imports admission's decisions and the tenants compiler as a
library, so that offline answers are the cluster's; no component may import a tool.)
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = Path(__file__).resolve().parents[2]
TOOLS = ("enclave-cli",)
"""Packages that run outside the cluster and may import components (never the other way round)."""
COMPONENTS = sorted(
    p.name.removeprefix("enclave-").replace("-", "_")
    for p in PACKAGES.iterdir()
    if p.is_dir() and p.name.startswith("enclave-") and p.name not in ("enclave-core", "enclave-testing", *TOOLS)
)


def _imports(package_dir: Path) -> set[tuple[str, str]]:
    found = set()
    for path in (package_dir / "src").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {(str(path), alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add((str(path), node.module))
    return found


@pytest.mark.parametrize("package", ["core", *COMPONENTS])
def test_no_component_imports_another(package: str) -> None:
    forbidden = {f"enclave_{c}" for c in COMPONENTS if c != package}
    forbidden |= {tool.replace("-", "_") for tool in TOOLS}
    crossings = sorted(
        f"{path}: imports {module}"
        for path, module in _imports(PACKAGES / f"enclave-{package}")
        if module.split(".")[0] in forbidden
    )
    assert not crossings, "\n".join(crossings)


def test_components_are_found() -> None:
    assert {"admission", "config", "tenants"} <= set(COMPONENTS)


def test_tools_are_not_components() -> None:
    assert "cli" not in COMPONENTS
    assert all((PACKAGES / tool).is_dir() for tool in TOOLS)


FORBIDDEN_IN_COMPONENTS = ("kubernetes",)
"""Modules no component process may load: the ``kubernetes`` client costs each process ~11 MB of RSS and ~300
modules on import (docs/decisions/0004-kube-client.md); components reach the API through
``enclave_core.kube.connection`` (the test-support package and the command line keep the sync client)."""


@pytest.mark.parametrize("package", COMPONENTS)
def test_component_entry_points_do_not_load_the_kubernetes_client(package: str) -> None:
    script = (
        f"import sys, enclave_{package}.__main__; "
        f"print(' '.join(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN_IN_COMPONENTS!r}))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert not result.stdout.split(), f"enclave_{package}.__main__ loads {result.stdout.split()[:5]}"
