"""The compiled admission wheel is reused exactly while the package's inputs are unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from enclave_testing import wheelcache


def _package(root: Path) -> Path:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "setup.py").write_text("print('setup')\n")
    (root / "src" / "pkg" / "review.py").write_text("X = 1\n")
    return root


def test_what_a_build_writes_leaves_the_digest_alone(tmp_path: Path) -> None:
    source = _package(tmp_path)
    before = wheelcache.digest(source)
    for output in (
        "build/lib/pkg/review.py",
        ".mypy_cache/3.11/cache.db",
        "src/pkg/__pycache__/review.pyc",
        "src/pkg.egg-info/PKG-INFO",
        "src/pkg/review.cpython-311-x86_64-linux-gnu.so",
    ):
        (source / output).parent.mkdir(parents=True, exist_ok=True)
        (source / output).write_text("output")
    assert wheelcache.digest(source) == before


@pytest.mark.parametrize("change", ["edit", "add", "rename"])
def test_any_change_of_an_input_is_a_new_wheel(tmp_path: Path, change: str) -> None:
    source = _package(tmp_path)
    before = wheelcache.digest(source)
    module = source / "src" / "pkg" / "review.py"
    if change == "edit":
        module.write_text("X = 2\n")
    elif change == "add":
        (source / "src" / "pkg" / "limits.py").write_text("")
    else:
        module.rename(module.with_name("answer.py"))
    assert wheelcache.digest(source) != before


def test_a_plain_build_is_another_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _package(tmp_path)
    compiled = wheelcache.digest(source)
    monkeypatch.setenv("ENCLAVE_MYPYC", "0")
    assert wheelcache.digest(source) != compiled
