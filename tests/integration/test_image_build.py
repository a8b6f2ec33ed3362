"""The image build's own checks, fast and without building anything (tests/image runs the built image).

hack/image/build.py fails in its first second, naming the Debian packages to install, when a tool it needs is
missing.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "hack" / "image" / "build.py"


@pytest.fixture(scope="module")
def build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("enclave_image_build", BUILD)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_tools(directory: Path, *names: str) -> str:
    for name in names:
        tool = directory / name
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)
    return str(directory)


def test_preflight_names_every_package_missing_from_path(build: ModuleType, tmp_path: Path) -> None:
    empty = str(tmp_path)
    assert build.missing_tools(empty) == ["binutils", "mmdebstrap", "skopeo", "umoci"]
    with pytest.raises(SystemExit) as refused:
        build.preflight(empty)
    message = str(refused.value.code)
    assert "apt-get install binutils mmdebstrap skopeo umoci" in message
    assert "strip" in message  # which programs, not only which packages


def test_preflight_names_only_what_is_missing(build: ModuleType, tmp_path: Path) -> None:
    path = fake_tools(tmp_path, "mmdebstrap", "strip")
    assert build.missing_tools(path) == ["skopeo", "umoci"]


@pytest.mark.parametrize(("args", "packages"), [([], "binutils mmdebstrap skopeo umoci")])
def test_build_without_the_tools_stops_at_once_with_the_install_command(
    tmp_path: Path, args: list[str], packages: str
) -> None:
    result = subprocess.run(
        [sys.executable, str(BUILD), "--out", str(tmp_path / "out"), *args],
        env={**os.environ, "PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result
    assert f"missing tools for the image build: apt-get install {packages} " in result.stderr
    assert not (tmp_path / "out").exists()  # refused before touching anything
