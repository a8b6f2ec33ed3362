"""``python -m enclave_testing.wheelcache``: install enclave-admission's compiled wheel, built once per source.

tox installs enclave-admission from its wheel, with the per-review modules compiled by mypyc (its ``setup.py``),
so the tests run the code that ships. That build is the slowest step of setting up an environment (mypy's analysis
and one C compile of every compiled module), and a fresh checkout (CI's every run) repeated it though the package
had not changed. The wheel is now kept in the machine's cache (:func:`enclave_testing.binaries.cache_root`,
``wheels/``) under a digest of everything that decides it: the package's files, the interpreter, and
``ENCLAVE_MYPYC``. A change to any file of the package builds a new one; nothing else does (the compiled modules
are built with ``--follow-imports=skip``, so other packages' sources do not enter them).

The environment records the digest it installed (``<prefix>/enclave-admission.digest``), so a tox run whose
package has not changed installs nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

from enclave_testing.binaries import cache_root
from enclave_testing.paths import repo_root

PACKAGE = "enclave-admission"
SKIPPED = {"build", "dist", "__pycache__"}
"""Directories a build or an interpreter writes into the package (and hidden ones: mypyc's ``.mypy_cache``); their
contents are outputs, not inputs."""
SKIPPED_SUFFIXES = (".egg-info", ".so", ".pyc", ".c", ".h")
KEPT = 4
"""Wheels kept per package: enough for a few branches side by side, small enough to forget about (a few MB each)."""


def digest(source: Path) -> str:
    """What decides the wheel: every input file's path and bytes, the interpreter's ABI and platform, the switch."""
    hasher = hashlib.sha256()
    for path in sorted(_inputs(source)):
        hasher.update(str(path.relative_to(source)).encode())
        hasher.update(b"\0")
        hasher.update(path.read_bytes())
        hasher.update(b"\0")
    hasher.update(f"{sys.implementation.cache_tag} {sysconfig.get_platform()}".encode())
    hasher.update(f" mypyc={os.environ.get('ENCLAVE_MYPYC', '1')}".encode())
    return hasher.hexdigest()[:24]


def _inputs(source: Path) -> Iterator[Path]:
    for directory, subdirectories, files in os.walk(source):
        subdirectories[:] = [
            name
            for name in subdirectories
            if name not in SKIPPED and not name.startswith(".") and not name.endswith(SKIPPED_SUFFIXES)
        ]
        for name in files:
            if not name.endswith(SKIPPED_SUFFIXES):
                yield Path(directory) / name


@contextlib.contextmanager
def _lock(root: Path) -> Iterator[None]:
    """One build per package at a time on the machine (two tox environments may set up together); a lock of its
    own, so a wheel never waits behind a control-plane build."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def wheel(source: Path, key: str) -> Path:
    """The cached wheel for ``key``, built first if missing (into a temporary directory, then renamed, so a build
    cut short never leaves a wheel behind)."""
    root = cache_root() / "wheels" / PACKAGE
    with _lock(root):
        target = root / key
        if not target.is_dir():
            staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
            try:
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "wheel",
                        "--quiet",
                        "--no-deps",
                        "--wheel-dir",
                        str(staging),
                        str(source),
                    ],
                    check=True,
                )
                staging.rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            _prune(root)
        built = sorted(target.glob("*.whl"))
        if len(built) != 1:
            raise RuntimeError(f"{target} holds {len(built)} wheels, not one: remove it and run again")
        return built[0]


def _prune(root: Path) -> None:
    kept = sorted(
        (path for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")),
        key=lambda path: path.stat().st_mtime,
        reverse=True,
    )
    for stale in kept[KEPT:]:
        shutil.rmtree(stale, ignore_errors=True)


def install(source: Path) -> str:
    """Install the package's wheel into this interpreter unless the digest it records is already this one."""
    key = digest(source)
    marker = Path(sys.prefix) / f"{PACKAGE}.digest"
    if marker.is_file() and marker.read_text().strip() == key:
        return f"{PACKAGE}: installed wheel is current ({key})"
    built = wheel(source, key)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # the package's own files replaced whatever was there (an editable install, an older build), then its
    # dependencies resolved as for any wheel
    subprocess.run([*pip, "--force-reinstall", "--no-deps", str(built)], check=True)
    subprocess.run([*pip, str(built)], check=True)
    marker.write_text(key + "\n")
    return f"{PACKAGE}: installed {built.name} ({key})"


def main() -> None:
    print(install(repo_root() / "packages" / PACKAGE), flush=True)


if __name__ == "__main__":
    main()
