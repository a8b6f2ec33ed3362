"""Build Enclave's container image with no container registry: from Debian's packages and the project's wheels.

``tox -e image`` runs this. The steps, each a tool Debian ships:

1. ``mmdebstrap --variant=extract`` unpacks ``python3.11`` and the Debian packages it depends on (plus
   ``libstdc++6`` for grpcio and cel-expr-python, ``base-files`` for ``/etc/os-release`` and ``netbase``) into
   an empty tree: no ``Essential: yes`` set, so no shell, coreutils, perl, apt or dpkg (the ``.deb`` files are
   cached in ``~/.cache/enclave/debs``, so a rebuild downloads nothing). No maintainer script runs (``extract``
   runs none, which is also why ``--mode=chrootless`` is safe: nothing executes, in or out of the tree); what
   the scripts of these packages would do (``ldconfig``, byte-compiling) is not needed or done below.
   ``dpkg`` and ``tar``, which ``readline-common``'s dependencies drag in, are removed again, and
   ``/var/lib/dpkg/status`` lists exactly the packages left, so image scanners (trivy, syft, grype) see them;
2. documentation, locales, iconv modules and caches are removed;
3. the project's wheels (``enclave-admission`` compiled with mypyc) and their dependencies from PyPI are
   installed into ``/usr/local/lib/python3.11/dist-packages`` by the host's pip for CPython 3.11 on
   manylinux x86_64, extension modules stripped of debug symbols (the host's ``strip``); no pip, compiler or
   build tool enters the image;
4. one launcher per component (``/usr/local/bin/enclave-<component>``, read from the wheels' entry points), a
   non-root user 65532, and every module byte-compiled once by the image's own interpreter
   (hack/image/compile_python.py says what is kept as source, as bytecode, or zipped, and why);
5. ``umoci`` packs the tree into an OCI image with its config (user, entry point, OCI labels: source, version,
   revision, created); ``skopeo`` writes it as an OCI archive.

The tag is ``<project version>-<git revision>`` (``-dirty`` when the tree has uncommitted changes), so the same
commit always gets the same tag. Output: ``.enclave/image/enclave-<tag>.oci.tar`` (OCI archive),
``enclave-<tag>.docker.tar`` (the same image as a docker archive, also tagged with the chart's appVersion, for
``podman load``, ``docker load``, ``kind load image-archive`` and ``crane push``) and the unpacked root filesystem, which the image tests run the components from. ``--rootfs-only DIR`` stops after step 4
(the ``Containerfile`` runs that in its build stage, so both builds make the same tree).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
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
TOOLS = {"mmdebstrap": "mmdebstrap", "strip": "binutils", "dpkg-deb": "dpkg", "umoci": "umoci", "skopeo": "skopeo"}
"""Program -> the Debian package that provides it."""
PACKING_TOOLS = ("umoci", "skopeo")
"""Not needed by ``--rootfs-only``."""
INCLUDE = ["python3.11", "libstdc++6", "base-files", "netbase"]
"""What the image is made of; apt adds their dependencies. libstdc++: grpcio's and cel-expr-python's extensions."""
DROP = ["dpkg", "tar"]
"""Pulled in only as dependencies of packages above (``readline-common``: ``dpkg | install-info``; dpkg: tar)."""
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
ENTRYPOINT = "/usr/local/bin/enclave-admission"
ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
LABELS = {
    "org.opencontainers.image.title": "Enclave",
    "org.opencontainers.image.description": "Multi-tenancy policy service for Kubernetes: every component's entry point",
    "org.opencontainers.image.source": SOURCE,
    "org.opencontainers.image.licenses": "Apache-2.0",
}
"""The labels that do not depend on the commit (the Containerfile has the same)."""
PASSWD = f"""root:x:0:0:root:/root:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
nonroot:x:{USER_ID}:{USER_ID}:Enclave:/home/nonroot:/usr/sbin/nologin
"""
GROUP = f"""root:x:0:
nogroup:x:65534:
nonroot:x:{USER_ID}:
"""


def log(message: str) -> None:
    print(f"[enclave-image] {message}", file=sys.stderr, flush=True)


def missing_tools(path: str | None = None, *, packing: bool = True) -> list[str]:
    """The Debian packages to install for the build's programs that ``path`` (default ``$PATH``) lacks."""
    return sorted(
        {
            package
            for tool, package in TOOLS.items()
            if (packing or tool not in PACKING_TOOLS) and shutil.which(tool, path=path) is None
        }
    )


def preflight(path: str | None = None, *, packing: bool = True) -> None:
    """Fail in the first second, naming the packages to install, rather than minutes into a build."""
    missing = missing_tools(path, packing=packing)
    if missing:
        raise SystemExit(
            f"missing tools for the image build: apt-get install {' '.join(missing)} "
            f"(needs: {', '.join(tool for tool, package in TOOLS.items() if package in missing)})"
        )
    if os.geteuid() != 0:
        raise SystemExit("the image build runs as root (file ownership inside the image, chroot to byte-compile)")


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


def bootstrap(rootfs: Path, epoch: int, workdir: Path) -> list[Path]:
    """Unpack the packages; returns the ``.deb`` files unpacked (from the cache)."""
    debs = cache_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    listing = workdir / "debs.txt"
    log(f"mmdebstrap {SUITE} (extract: {', '.join(INCLUDE)} and their dependencies) from {MIRROR}; .deb cache {debs}")
    excludes = [
        f"--dpkgopt=path-exclude=/{path}/*"
        for path in ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info")
    ]
    run(
        [
            "mmdebstrap",
            "--mode=chrootless",
            "--variant=extract",
            f"--include={','.join(INCLUDE)}",
            *excludes,
            # merged /usr, as Debian 12 systems are: /bin, /lib, ... are links into /usr
            '--setup-hook=for d in bin sbin lib lib64; do mkdir -p "$1/usr/$d"; ln -s "usr/$d" "$1/$d"; done',
            '--setup-hook=mkdir -p "$1"/var/cache/apt/archives',
            f"--setup-hook=sync-in {debs} /var/cache/apt/archives",
            f"--extract-hook=sync-out /var/cache/apt/archives {debs}",
            f'--extract-hook=printf "%s\\n" $MMDEBSTRAP_ESSENTIAL > {listing}',
            SUITE,
            str(rootfs),
            MIRROR,
        ],
        env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)},
    )
    return [debs / Path(line.strip()).name for line in listing.read_text().split() if line.strip()]


def control(deb: Path) -> str:
    return run(["dpkg-deb", "--field", str(deb)]).strip()


def field(stanza: str, name: str) -> str:
    for line in stanza.splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    return ""


def drop_packages(rootfs: Path, unpacked: list[Path]) -> list[str]:
    """Remove the files of :data:`DROP`'s packages; write the dpkg status of the rest; returns the rest."""
    kept: dict[str, str] = {}
    for deb in unpacked:
        stanza = control(deb)
        name = field(stanza, "Package")
        if name not in DROP:
            lines = stanza.splitlines()
            kept[name] = "\n".join([lines[0], "Status: install ok installed", *lines[1:]])
            continue
        listing = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(listing)) as archive:
            members = archive.getmembers()
        for member in members:
            path = rootfs / member.name.removeprefix("./")
            if not member.isdir() and (path.is_symlink() or path.exists()):
                path.unlink()
        for member in sorted((m for m in members if m.isdir()), key=lambda m: m.name, reverse=True):
            path = rootfs / member.name.removeprefix("./")
            if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
                path.rmdir()
    status = rootfs / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True, exist_ok=True)
    status.write_text("\n\n".join(kept[name] for name in sorted(kept)) + "\n")
    return sorted(kept)


def trim(rootfs: Path) -> None:
    for relative in TRIM:
        shutil.rmtree(rootfs / relative, ignore_errors=True)
    # Device nodes belong to the container runtime, which mounts its own /dev; an image carries none.
    for entry in (rootfs / "dev").iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
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
    """root and nobody as Debian's base-passwd has them (not installed: it comes with the essential set), and 65532."""
    (rootfs / "etc/passwd").write_text(PASSWD)
    (rootfs / "etc/group").write_text(GROUP)
    home = rootfs / "home/nonroot"
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, USER_ID, USER_ID)


def compile_python(rootfs: Path, epoch: int) -> None:
    """Byte-compile with the image's interpreter, inside the tree (hack/image/compile_python.py)."""
    log("byte-compiling with the image's python3.11 (standard library and pure-Python packages zipped)")
    script = rootfs / "tmp/compile_python.py"
    shutil.copy(Path(__file__).with_name("compile_python.py"), script)
    try:
        run(["chroot", str(rootfs), "/usr/bin/python3.11", "-I", "/tmp/compile_python.py", str(epoch)])
    finally:
        script.unlink()


def make_rootfs(rootfs: Path, workdir: Path, epoch: int) -> dict[str, str]:
    """Steps 1-4: the image's whole tree; returns the console scripts (component -> ``module:function``)."""
    unpacked = bootstrap(rootfs, epoch, workdir)
    drop_packages(rootfs, unpacked)
    trim(rootfs)
    built = wheels(workdir)
    install(rootfs, built)
    scripts = entry_points(built)
    launchers(rootfs, scripts)
    user(rootfs)
    compile_python(rootfs, epoch)
    return scripts


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
        **LABELS,
        "org.opencontainers.image.version": tag,
        "org.opencontainers.image.revision": rev,
        "org.opencontainers.image.created": created,
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
        *[f"--config.env={key}={value}" for key, value in ENV.items()],
        f"--config.entrypoint={ENTRYPOINT}",
        *[f"--config.label={key}={value}" for key, value in labels.items()],
    ]
    run(command)
    run(["umoci", "gc", "--layout", str(layout)])
    os.replace(bundle / "rootfs", rootfs)
    shutil.rmtree(bundle, ignore_errors=True)


def write_archives(layout: str, tag: str, out: Path) -> tuple[Path, Path]:
    """The image as an OCI archive named ``REPOSITORY:<tag>``, and as a docker archive with the chart's tag too.

    ``<version>-<revision>`` names this commit's build; ``<version>`` is the chart's appVersion, the tag its
    default values pull. An OCI archive holding two names trips ``podman load`` ("more than one image in oci"),
    so the second name goes in the docker archive, whose ``RepoTags`` may list several: ``podman load``,
    ``docker load``, ``kind load image-archive`` and ``crane push`` all read that format. ``layout`` is a
    ``containers-transports`` reference to the packed image (``oci:<dir>:<ref>``).
    """
    oci, docker = out / f"enclave-{tag}.oci.tar", out / f"enclave-{tag}.docker.tar"
    for path in (oci, docker):
        path.unlink(missing_ok=True)
    run(["skopeo", "copy", "--quiet", layout, f"oci-archive:{oci}:{REPOSITORY}:{tag}"])
    chart_tag = f"{REPOSITORY}:{version()}"
    run(
        [
            "skopeo",
            "copy",
            "--quiet",
            "--additional-tag",
            chart_tag,
            layout,
            f"docker-archive:{docker}:{REPOSITORY}:{tag}",
        ]
    )
    return oci, docker


def size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


SIZE_ROWS = [
    "usr/lib/x86_64-linux-gnu",
    "usr/bin",
    "usr/lib/python3.11",
    "usr/lib/python311.zip",
    "usr/local/lib/python3.11/dist-packages",
    "usr/local/lib/python3.11/dist-packages/site-packages.zip",
    "usr/local/lib/python3.11/dist-packages/cel_expr_python",
    "usr/local/lib/python3.11/dist-packages/grpc",
    "usr/local/lib/python3.11/dist-packages/cryptography",
    "usr/local/lib/python3.11/dist-packages/pydantic_core",
    "usr/local/lib/python3.11/dist-packages/kubernetes",
    "usr/local/lib/python3.11/dist-packages/enclave_admission",
]
"""The rows of the size table in charts/enclave/README.md ("The image")."""


def sizes(rootfs: Path) -> dict[str, int]:
    table = {"(total)": size(rootfs)}
    for row in SIZE_ROWS:
        path = rootfs / row
        table[row] = size(path) if path.is_dir() else path.stat().st_size if path.exists() else 0
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".enclave" / "image")
    parser.add_argument("--rootfs-only", type=Path, metavar="DIR", help="only make the image's tree, in DIR")
    args = parser.parse_args(argv)
    preflight(packing=args.rootfs_only is None)
    if args.rootfs_only is not None:
        epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0")) or int(time.time())
        target: Path = args.rootfs_only
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="enclave-image-", dir=target.parent) as scratch:
            make_rootfs(target, Path(scratch), epoch)
        log(f"image tree in {target}: {size(target) / 1e6:.0f} MB")
        return 0
    rev, dirty, epoch = revision()
    tag = f"{version()}-{rev}{'-dirty' if dirty else ''}"
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="enclave-image-", dir=out) as scratch:
        workdir = Path(scratch)
        rootfs = workdir / "rootfs"
        scripts = make_rootfs(rootfs, workdir, epoch)
        layout = workdir / "oci"
        pack(rootfs, layout, tag, rev, epoch, scripts)
        archive, docker_archive = write_archives(f"oci:{layout}:{tag}", tag, out)
        final_rootfs = out / "rootfs"
        shutil.rmtree(final_rootfs, ignore_errors=True)
        os.replace(rootfs, final_rootfs)
    manifest: dict[str, object] = {
        "repository": REPOSITORY,
        "tag": tag,
        "archive": str(archive),
        "docker_archive": str(docker_archive),
        "rootfs": str(final_rootfs),
        "components": sorted(scripts),
        "archive_bytes": archive.stat().st_size,
        "docker_archive_bytes": docker_archive.stat().st_size,
        "rootfs_bytes": size(final_rootfs),
        "sizes": sizes(final_rootfs),
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
