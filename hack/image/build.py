"""Build Enclave's container image with no container registry: from Debian's packages and the project's wheels.

``tox -e image`` runs this. The steps, each a tool Debian ships:

1. ``mmdebstrap --variant=essential`` makes a minimal Debian 12 root filesystem with ``python3.11`` (the
   ``.deb`` files are cached in ``~/.cache/enclave/debs``, so a rebuild downloads nothing);
2. what the image needs no longer is removed: perl and ``usrmerge`` (pulled in by the bootstrap, not by Python),
   documentation, locales, iconv modules, and the package manager's programs (``/usr/bin/dpkg*``; the package
   database ``/var/lib/dpkg/status`` stays, so image scanners can still list what is inside);
3. the project's wheels (``enclave-admission`` compiled with mypyc) and their dependencies from PyPI are
   installed into ``/usr/local/lib/python3.11/dist-packages`` by the host's pip for CPython 3.11 on manylinux x86_64; no pip,
   compiler or build tool enters the image;
4. one launcher per component (``/usr/local/bin/enclave-<component>``, read from the wheels' entry points), a
   non-root user 65532, and ``umoci`` packs the tree into an OCI image with its config (user, entry point, OCI
   labels: source, version, revision, created); ``skopeo`` writes it as an OCI archive.

The tag is ``<project version>-<git revision>`` (``-dirty`` when the tree has uncommitted changes), so the same
commit always gets the same tag. Output: ``.enclave/image/enclave-<tag>.oci.tar`` and the unpacked root
filesystem next to it, which the image tests run the components from.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "ghcr.io/enclave-dev/enclave"
SOURCE = "https://github.com/enclave-dev/enclave"
SUITE = "bookworm"
MIRROR = os.environ.get("ENCLAVE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SITE = "/usr/local/lib/python3.11/dist-packages"
"""Where Debian's python3.11 looks for local packages by itself: ``python -m <module>`` works with no PYTHONPATH."""
USER_ID = 65532
TOOLS = {"mmdebstrap": "mmdebstrap", "strip": "binutils", "umoci": "umoci", "skopeo": "skopeo"}
"""Program -> the Debian package that provides it."""
PURGE = [
    "usrmerge",
    "libfile-find-rule-perl",
    "libnumber-compare-perl",
    "libtext-glob-perl",
    "perl",
    "perl-modules-5.36",
    "libperl5.36",
    "libgdbm-compat4",
]
"""Pulled in by the bootstrap (init-system-helpers' ``usrmerge | usr-is-merged``), needed by nothing we run."""
TRIM = [
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/bash-completion",
    "usr/lib/x86_64-linux-gnu/gconv",
    "var/cache/apt",
    "var/cache/debconf",
    "var/lib/apt",
    "var/log",
]


def log(message: str) -> None:
    print(f"[enclave-image] {message}", file=sys.stderr, flush=True)


def missing_tools(path: str | None = None) -> list[str]:
    """The Debian packages to install for the build's programs that ``path`` (default ``$PATH``) lacks."""
    return sorted({package for tool, package in TOOLS.items() if shutil.which(tool, path=path) is None})


def preflight(path: str | None = None) -> None:
    """Fail in the first second, naming the packages to install, rather than minutes into a build."""
    missing = missing_tools(path)
    if missing:
        raise SystemExit(
            f"missing tools for the image build: apt-get install {' '.join(missing)} "
            f"(needs: {', '.join(tool for tool, package in TOOLS.items() if package in missing)})"
        )
    if os.geteuid() != 0:
        raise SystemExit("the image build runs mmdebstrap and umoci as root (file ownership inside the image)")


def run(command: list[str], **kwargs: object) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return str(result.stdout)


def version() -> str:
    return str(tomllib.loads((ROOT / "packages/enclave-core/pyproject.toml").read_text())["project"]["version"])


def revision() -> tuple[str, bool, int]:
    """(short revision, tree dirty, commit time): the tag and SOURCE_DATE_EPOCH come from git."""
    rev = run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"]).strip()
    dirty = bool(run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"]).strip())
    epoch = int(run(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"]).strip())
    return rev, dirty, epoch


def cache_dir() -> Path:
    return Path(os.environ.get("ENCLAVE_CACHE_DIR", Path.home() / ".cache" / "enclave"))


def bootstrap(rootfs: Path, epoch: int) -> None:
    debs = cache_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    log(f"mmdebstrap {SUITE} (essential + python3.11, libstdc++6) from {MIRROR}; .deb cache {debs}")
    excludes = [
        f"--dpkgopt=path-exclude=/{path}/*"
        for path in ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info")
    ]
    run(
        [
            "mmdebstrap",
            "--variant=essential",
            "--include=python3.11,libstdc++6,usr-is-merged",  # libstdc++: grpcio and cel-expr-python
            *excludes,
            '--setup-hook=mkdir -p "$1"/var/cache/apt/archives',
            f"--setup-hook=sync-in {debs} /var/cache/apt/archives",
            f"--customize-hook=sync-out /var/cache/apt/archives {debs}",
            f'--customize-hook=chroot "$1" dpkg --purge --force-depends {" ".join(PURGE)}',
            SUITE,
            str(rootfs),
            MIRROR,
        ],
        env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)},
    )


def trim(rootfs: Path) -> None:
    for relative in TRIM:
        shutil.rmtree(rootfs / relative, ignore_errors=True)
    # Device nodes belong to the container runtime, which mounts its own /dev; an image carries none.
    for entry in (rootfs / "dev").iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for program in (rootfs / "usr/bin").glob("dpkg*"):
        program.unlink()
    (rootfs / "usr/share/doc").mkdir(parents=True, exist_ok=True)


def wheels(workdir: Path) -> list[Path]:
    """The project's wheels, built the way tox builds them (admission compiled by mypyc)."""
    out = workdir / "wheels"
    out.mkdir()
    packages = sorted(
        p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists() and p.name != "enclave-testing"
    )
    log(f"building wheels: {', '.join(p.name for p in packages)}")
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), *map(str, packages)],
        env={**os.environ, "ENCLAVE_MYPYC": os.environ.get("ENCLAVE_MYPYC", "1")},
    )
    return sorted(out.glob("*.whl"))


def install(rootfs: Path, built: list[Path]) -> None:
    target = rootfs / SITE.lstrip("/")
    log(f"installing {len(built)} wheels and their dependencies into {SITE}")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-compile",
            "--no-warn-script-location",
            "--target",
            str(target),
            "--only-binary=:all:",
            "--implementation=cp",
            "--python-version=3.11",
            "--abi=cp311",
            "--platform=manylinux2014_x86_64",
            "--platform=manylinux_2_28_x86_64",
            "--platform=linux_x86_64",
            *map(str, built),
        ]
    )
    # Debug symbols are most of some extensions' size (cel-expr-python's: a quarter) and nothing here reads them.
    objects = [str(path) for path in target.rglob("*.so*") if path.is_file() and not path.is_symlink()]
    run(["strip", "--strip-unneeded", *objects])
    # What the image never runs: console scripts written for the host's Python, tests shipped in packages.
    shutil.rmtree(target / "bin", ignore_errors=True)
    for pattern in ("**/__pycache__", "**/tests", "*.dist-info/RECORD"):
        for path in target.glob(pattern):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()


def entry_points(built: list[Path]) -> dict[str, str]:
    """console script -> ``module:function``, from the wheels' metadata."""
    scripts: dict[str, str] = {}
    for wheel in built:
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.endswith(".dist-info/entry_points.txt"):
                    section = ""
                    for line in archive.read(name).decode().splitlines():
                        line = line.strip()
                        if line.startswith("["):
                            section = line
                        elif section == "[console_scripts]" and "=" in line:
                            script, target = (part.strip() for part in line.split("=", 1))
                            scripts[script] = target
    return scripts


def launchers(rootfs: Path, scripts: dict[str, str]) -> None:
    bindir = rootfs / "usr/local/bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for script, target in sorted(scripts.items()):
        module, function = target.split(":")
        path = bindir / script
        path.write_text(
            f"#!/usr/bin/python3.11 -I\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n"
        )
        path.chmod(0o755)
    # The chart runs ``python -m <module>``, as a development checkout does.
    (bindir / "python").symlink_to("/usr/bin/python3.11")


def user(rootfs: Path) -> None:
    with open(rootfs / "etc/passwd", "a") as passwd:
        passwd.write(f"nonroot:x:{USER_ID}:{USER_ID}:Enclave:/home/nonroot:/usr/sbin/nologin\n")
    with open(rootfs / "etc/group", "a") as group:
        group.write(f"nonroot:x:{USER_ID}:\n")
    home = rootfs / "home/nonroot"
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, USER_ID, USER_ID)


def pack(rootfs: Path, layout: Path, tag: str, rev: str, epoch: int, scripts: dict[str, str]) -> None:
    log(f"packing {REPOSITORY}:{tag} with umoci")
    image = f"{layout}:{tag}"
    run(["umoci", "init", "--layout", str(layout)])
    run(["umoci", "new", "--image", image])
    bundle = layout.parent / "bundle"
    run(["umoci", "unpack", "--image", image, str(bundle)])
    # Moved, not copied: the tree is whole as it is (and moves back once packed, for the image tests).
    shutil.rmtree(bundle / "rootfs")
    os.replace(rootfs, bundle / "rootfs")
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    run(
        ["umoci", "repack", "--image", image, "--history.created", created, "--history.comment", "Enclave", str(bundle)]
    )
    labels = {
        "org.opencontainers.image.title": "Enclave",
        "org.opencontainers.image.description": "Multi-tenancy policy service for Kubernetes: every component's entry point",
        "org.opencontainers.image.source": SOURCE,
        "org.opencontainers.image.version": tag,
        "org.opencontainers.image.revision": rev,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "dev.enclave.components": ",".join(sorted(scripts)),
    }
    command = [
        "umoci",
        "config",
        "--image",
        image,
        "--created",
        created,
        "--author",
        "Enclave",
        "--os",
        "linux",
        "--architecture",
        "amd64",
        f"--config.user={USER_ID}:{USER_ID}",
        "--config.workingdir=/home/nonroot",
        "--config.env=PYTHONDONTWRITEBYTECODE=1",
        "--config.env=PYTHONUNBUFFERED=1",
        "--config.entrypoint=/usr/local/bin/enclave-admission",
        *[f"--config.label={key}={value}" for key, value in labels.items()],
    ]
    run(command)
    run(["umoci", "gc", "--layout", str(layout)])
    os.replace(bundle / "rootfs", rootfs)
    shutil.rmtree(bundle, ignore_errors=True)


def size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".enclave" / "image")
    args = parser.parse_args(argv)
    preflight()
    rev, dirty, epoch = revision()
    tag = f"{version()}-{rev}{'-dirty' if dirty else ''}"
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="enclave-image-", dir=out) as scratch:
        workdir = Path(scratch)
        rootfs = workdir / "rootfs"
        bootstrap(rootfs, epoch)
        trim(rootfs)
        built = wheels(workdir)
        install(rootfs, built)
        scripts = entry_points(built)
        launchers(rootfs, scripts)
        user(rootfs)
        layout = workdir / "oci"
        pack(rootfs, layout, tag, rev, epoch, scripts)
        archive = out / f"enclave-{tag}.oci.tar"
        archive.unlink(missing_ok=True)
        run(["skopeo", "copy", "--quiet", f"oci:{layout}:{tag}", f"oci-archive:{archive}:{REPOSITORY}:{tag}"])
        final_rootfs = out / "rootfs"
        shutil.rmtree(final_rootfs, ignore_errors=True)
        os.replace(rootfs, final_rootfs)
    manifest: dict[str, object] = {
        "repository": REPOSITORY,
        "tag": tag,
        "archive": str(archive),
        "rootfs": str(final_rootfs),
        "components": sorted(scripts),
        "archive_bytes": archive.stat().st_size,
        "rootfs_bytes": size(final_rootfs),
        "seconds": round(time.monotonic() - started),
    }
    (out / "image.json").write_text(json.dumps(manifest, indent=2) + "\n")
    log(
        f"{REPOSITORY}:{tag}: {archive.stat().st_size / 1e6:.0f} MB compressed (OCI archive), "
        f"{size(final_rootfs) / 1e6:.0f} MB unpacked, in {manifest['seconds']} s -> {archive}"
    )
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
