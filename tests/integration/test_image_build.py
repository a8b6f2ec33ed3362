"""The image build's own checks, fast and without building anything (tests/image runs the built image).

hack/image/build.py fails in its first second, naming the Debian packages to install, when a tool it needs is
missing; the ``Containerfile`` makes its tree with that same script, so the two builds cannot drift apart; the
chart's default image is the one the build names.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

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
    assert build.missing_tools(empty) == ["binutils", "dpkg", "mmdebstrap", "skopeo", "umoci"]
    with pytest.raises(SystemExit) as refused:
        build.preflight(empty)
    message = str(refused.value.code)
    assert "apt-get install binutils dpkg mmdebstrap skopeo umoci" in message
    assert "strip" in message  # which programs, not only which packages
    assert "dpkg-deb" in message


def test_preflight_names_only_what_is_missing(build: ModuleType, tmp_path: Path) -> None:
    path = fake_tools(tmp_path, "mmdebstrap", "strip", "dpkg-deb")
    assert build.missing_tools(path) == ["skopeo", "umoci"]
    # The Containerfile's build stage only makes the tree: it needs no OCI tools.
    assert build.missing_tools(path, packing=False) == []
    assert build.missing_tools(str(tmp_path / "none"), packing=False) == ["binutils", "dpkg", "mmdebstrap"]


@pytest.mark.parametrize(
    ("args", "packages"),
    [([], "binutils dpkg mmdebstrap skopeo umoci"), (["--rootfs-only", "/nonexistent"], "binutils dpkg mmdebstrap")],
)
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


def containerfile_stages() -> list[list[str]]:
    """The Containerfile's instructions (continuation lines joined), one list per ``FROM`` stage."""
    lines = (ROOT / "Containerfile").read_text().replace("\\\n", " ").splitlines()
    stages: list[list[str]] = []
    for line in lines:
        line = " ".join(line.split())
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_containerfile_makes_its_tree_with_the_build_script_and_gives_it_the_same_config(build: ModuleType) -> None:
    builder, final = containerfile_stages()
    run = " ".join(line for line in builder if line.startswith("RUN "))
    assert "hack/image/build.py --rootfs-only /rootfs" in run
    for package in set(build.TOOLS.values()) - {"umoci", "skopeo", "dpkg"}:  # dpkg: in every Debian image
        assert f" {package} " in f" {run} ", package
    # The final stage is that tree and nothing else, with build.py's user, entry point, environment and labels.
    assert final[0] == "FROM scratch"
    assert [line for line in final if line.startswith(("COPY", "RUN", "ADD"))] == ["COPY --from=build /rootfs/ /"]
    assert f"USER {build.USER_ID}:{build.USER_ID}" in final
    assert f'ENTRYPOINT ["{build.ENTRYPOINT}"]' in final
    assert "ENV " + " ".join(f"{key}={value}" for key, value in build.ENV.items()) in final
    label = next(line for line in final if line.startswith("LABEL "))
    for key, value in build.LABELS.items():
        assert f'{key}="{value}"' in label, key
    for key in ("org.opencontainers.image.version", "org.opencontainers.image.revision"):
        assert f"{key}=" in label, key


def test_chart_default_image_is_the_one_the_build_names(build: ModuleType) -> None:
    chart = yaml.safe_load((ROOT / "charts/enclave/Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "charts/enclave/values.yaml").read_text())
    assert values["global"]["image"]["repository"] == build.REPOSITORY
    assert values["global"]["image"]["tag"] == ""  # empty: the chart's appVersion
    # The build's docker archive holds the image as <version>-<revision> and as <version> (build.write_archives).
    assert chart["appVersion"] == build.version()
    for component, settings in values.items():
        if component != "global" and isinstance(settings, dict) and isinstance(settings.get("image"), dict):
            assert not settings["image"].get("repository"), component
            assert not settings["image"].get("tag"), component
