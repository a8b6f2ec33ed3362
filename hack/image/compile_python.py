"""Compile the image's Python code once, at build time, with the image's own interpreter; keep the bytecode.

hack/image/build.py runs this inside the image's root filesystem (``chroot <rootfs> /usr/bin/python3.11
/tmp/compile_python.py <epoch>``), so the bytecode is what that very interpreter would write (no host Python,
whose patch release may differ). Only the standard library is used: the image has nothing else before this runs.

Why bytecode and not sources: the image's files are read-only at run time (user 65532, and
``PYTHONDONTWRITEBYTECODE``), so an image with sources only makes every process compile every module it imports
on each start (the Kubernetes client alone is 75 MB of source), and sources beside their bytecode cost the
size twice. So, the choice per kind of code:

- **the standard library** goes into ``/usr/lib/python311.zip`` as bytecode only: the interpreter already looks
  there first (it is on ``sys.path`` before ``/usr/lib/python3.11``), and ``zipimport`` reads compressed members,
  so the library costs a quarter of its source size (the layout of Python's own embeddable distribution);
  ``/usr/lib/python3.11`` keeps ``lib-dynload`` (extension modules cannot load from a zip) and ``os.py``, the
  landmark from which the interpreter finds its prefix;
- **third-party packages of Python files only** whose code does not look for files beside itself (no
  ``__file__`` in it) go into ``site-packages.zip`` in the same way, added to ``sys.path`` by a ``.pth`` file;
  that is mostly the Kubernetes client (75 MB of source, 13 MB zipped bytecode);
- **other third-party packages** (extension modules, data files, or code that reads files next to itself) keep
  their directories with each ``.py`` replaced by its ``.pyc`` (sourceless: ``__file__`` still names a file in
  the package's directory, so files beside it are found);
- **Enclave's own packages** keep their sources next to ``__pycache__`` bytecode, so a traceback from Enclave's
  code shows the failing lines; a traceback through a library shows the file and line number (of the pinned
  release) without the text.

Every ``.pyc`` is an unchecked-hash pyc (PEP 552): valid whatever the files' timestamps, never re-validated,
which is what an immutable image wants. Zip members are sorted and dated from ``SOURCE_DATE_EPOCH``.
"""

from __future__ import annotations

import os
import py_compile
import shutil
import sys
import tempfile
import time
import zipfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

STDLIB = Path("/usr/lib/python3.11")
STDLIB_ZIP = Path("/usr/lib/python311.zip")
SITE = Path("/usr/local/lib/python3.11/dist-packages")
SITE_ZIP = SITE / "site-packages.zip"
OWN_PREFIX = "enclave_"
STDLIB_KEEP_ON_DISK = {"lib-dynload", "os.py"}
STDLIB_DROP = {
    "test",  # CPython's regression-test helpers
    "idlelib",
    "tkinter",
    "turtledemo",
    "turtle.py",
    "lib2to3",
    "pydoc_data",  # pydoc's topic index and CSS: help() in a server image
    "ensurepip",
    "venv",  # creating virtual environments; its activate scripts are data files
    "sitecustomize.py",  # a symlink to /etc/python3.11/sitecustomize.py (Debian's apport hook, absent here)
    "EXTERNALLY-MANAGED",
    "LICENSE.txt",
    "__pycache__",
}
TYPING_ONLY = {".pyi", ".typed"}


def compile_to(source: Path, display: str, target: Path) -> None:
    py_compile.compile(
        str(source),
        cfile=str(target),
        dfile=display,
        doraise=True,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )


def write_zip(archive: Path, members: dict[str, Path], stamp: tuple[int, int, int, int, int, int]) -> None:
    """``members``: name in the archive -> source file, compiled into the archive as ``<name>c``."""
    directories = {
        str(Path(name).parents[index]) + "/"
        for name in members
        for index in range(len(Path(name).parents) - 1)  # the last parent is "."
    }
    with tempfile.TemporaryDirectory() as scratch, zipfile.ZipFile(archive, "w") as out:
        for directory in sorted(directories):
            info = zipfile.ZipInfo(directory, date_time=stamp)
            info.external_attr = (0o40755 << 16) | 0x10
            out.writestr(info, b"")
        for name, source in sorted(members.items()):
            compiled = Path(scratch) / "module.pyc"
            compile_to(source, f"{archive}/{name}", compiled)
            info = zipfile.ZipInfo(name + "c", date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o100644 << 16
            out.writestr(info, compiled.read_bytes(), compresslevel=9)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def stdlib(stamp: tuple[int, int, int, int, int, int]) -> None:
    """Last, as this very program runs on the library it removes (everything it needs is imported by then)."""
    members: dict[str, Path] = {}
    moved: list[Path] = []
    for entry in sorted(STDLIB.iterdir()):
        if entry.name in STDLIB_KEEP_ON_DISK:
            continue
        moved.append(entry)
        if entry.name in STDLIB_DROP:
            continue
        files = [entry] if entry.is_file() else sorted(entry.rglob("*.py"))
        for path in files:
            if path.suffix == ".py" and "__pycache__" not in path.parts:
                members[str(path.relative_to(STDLIB))] = path
    write_zip(STDLIB_ZIP, members, stamp)
    for entry in moved:  # data files of what stays (email/architecture.rst) are documentation
        remove(entry)


def zippable(entry: Path) -> bool:
    """Python files only, none of which locates files beside itself through ``__file__``."""
    if entry.is_file():
        return entry.suffix == ".py" and "__file__" not in entry.read_text(errors="replace")
    for path in entry.rglob("*"):
        if path.is_dir() or "__pycache__" in path.parts:
            continue
        if path.suffix in TYPING_ONLY:
            continue
        if path.suffix != ".py" or "__file__" in path.read_text(errors="replace"):
            return False
    return True


def site_packages(stamp: tuple[int, int, int, int, int, int]) -> None:
    for cache in sorted(SITE.rglob("__pycache__")):
        shutil.rmtree(cache)
    for stub in sorted(SITE.rglob("*.pyi")):
        stub.unlink()
    for test in sorted(SITE.rglob("*_test.py")):  # the Kubernetes client ships its unit tests beside the code
        if not test.parent.name.startswith(OWN_PREFIX):
            test.unlink()
    members: dict[str, Path] = {}
    zipped: list[Path] = []
    for entry in sorted(SITE.iterdir()):
        if entry.name.endswith((".dist-info", ".pth")) or entry.name.startswith(OWN_PREFIX):
            continue
        if entry.suffix == ".so" or (entry.is_file() and entry.suffix != ".py"):
            continue
        if zippable(entry):
            zipped.append(entry)
            files = [entry] if entry.is_file() else sorted(entry.rglob("*.py"))
            for path in files:
                members[str(path.relative_to(SITE))] = path
        else:
            for source in sorted(entry.rglob("*.py")):
                compile_to(source, str(source), source.with_suffix(".pyc"))
                source.unlink()
    if members:
        write_zip(SITE_ZIP, members, stamp)
        (SITE / "site-packages-zip.pth").write_text(SITE_ZIP.name + "\n")
    for entry in zipped:
        remove(entry)
    for entry in sorted(SITE.iterdir()):
        if entry.name.startswith(OWN_PREFIX) and entry.is_dir() and not entry.name.endswith(".dist-info"):
            for source in sorted(entry.rglob("*.py")):
                if any(source.with_name(source.stem + suffix).exists() for suffix in EXTENSION_SUFFIXES):
                    continue  # compiled by mypyc: the extension module is what imports, the source is for reading
                cached = source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc"
                cached.parent.mkdir(exist_ok=True)
                compile_to(source, str(source), cached)


def main() -> int:
    epoch = max(int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("SOURCE_DATE_EPOCH", "0")), 315532800)
    stamp = time.gmtime(epoch)[:6]
    site_packages(stamp)  # type: ignore[arg-type]
    stdlib(stamp)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
