"""`tox -e up` (the main job on a fresh machine) brings everything up and shuts it down cleanly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml


def test_up_starts_components_and_applies_samples(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "enclave_testing.up", "--workdir", str(tmp_path), "--exit-when-ready"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "component config: ready" in done.stdout
    assert "Tenant/solar" in done.stdout
    kubeconfig = yaml.safe_load((tmp_path / "kubeconfig").read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"].startswith("https://127.0.0.1:")
    assert "[enclave-up] stopping" in done.stdout
