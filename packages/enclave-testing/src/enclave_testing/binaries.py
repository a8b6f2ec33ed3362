"""The one place that knows the control-plane binaries: which exist, how they are built, where they are cached.

There is no Docker engine on our machines, so the test control plane is compiled from the published Go
modules pinned in ``hack/controlplane/<minor>/{kubernetes,etcd}/go.mod`` (one directory per supported
Kubernetes minor, etcd as that release pairs it; ``go.sum`` committed) and ``hack/controlplane/helm*/``. The
pinned version is read from those files rather than repeated here, so bumping a version is a one-file change
(``python hack/controlplane/pin.py`` writes a new minor). ``ENCLAVE_KUBERNETES_VERSION`` (``1.36``, ``v1.36``
or the exact pinned ``1.36.3``) selects the minor; without it :data:`DEFAULT_KUBERNETES_MINOR` is used. Builds land in
a cache outside the work tree, keyed by version and by a hash of ``go.sum``, so a second run costs a stat call.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from enclave_testing.paths import repo_root


@dataclass(frozen=True)
class BinarySpec:
    """How one binary is produced: the Go module directory under hack/controlplane and the package to build."""

    name: str
    module_dir: str
    package: str
    pinned_module: str
    per_kubernetes_minor: bool = False
    hack_dir: str = "controlplane"
    """The folder under ``hack/`` that holds ``module_dir`` (peers we benchmark against live outside
    ``hack/controlplane``, which is only the control plane and its clients)."""

    def version_ldflags(self, version: str, commit: str, build_date: str) -> list[str]:
        """Version stamps, so that ``/version`` and ``--version`` report the real release."""
        if self.pinned_module == "k8s.io/kubernetes":
            major, minor = version.lstrip("v").split(".")[:2]
            stamps = {
                "gitVersion": version,
                "gitMajor": major,
                "gitMinor": minor,
                "gitCommit": commit,
                "gitTreeState": "clean",
                "buildDate": build_date,
            }
            flags = []
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
                flags += [f"-X {pkg}.{key}={value}" for key, value in stamps.items()]
            return flags
        if self.pinned_module in ("helm.sh/helm/v3", "helm.sh/helm/v4"):
            return [
                f"-X {self.pinned_module}/internal/version.version={version}",
                f"-X {self.pinned_module}/internal/version.gitCommit={commit}",
                f"-X {self.pinned_module}/internal/version.gitTreeState=clean",
            ]
        if self.pinned_module == "github.com/projectcapsule/capsule":
            return [
                f"-X {self.pinned_module}/internal/version.GitTag={version}",
                f"-X {self.pinned_module}/internal/version.GitCommit={commit}",
                f"-X {self.pinned_module}/internal/version.BuildTime={build_date}",
            ]
        return []


BINARIES: dict[str, BinarySpec] = {
    spec.name: spec
    for spec in (
        BinarySpec("etcd", "etcd", ".", "go.etcd.io/etcd/server/v3", per_kubernetes_minor=True),
        BinarySpec(
            "kube-apiserver",
            "kubernetes",
            "k8s.io/kubernetes/cmd/kube-apiserver",
            "k8s.io/kubernetes",
            per_kubernetes_minor=True,
        ),
        BinarySpec(
            "kube-controller-manager",
            "kubernetes",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes",
            per_kubernetes_minor=True,
        ),
        BinarySpec(
            "kube-scheduler",
            "kubernetes",
            "k8s.io/kubernetes/cmd/kube-scheduler",
            "k8s.io/kubernetes",
            per_kubernetes_minor=True,
        ),
        # The client a user of `tox -e up` types into: the same release as the control plane it talks to, from
        # a module of its own (hack/controlplane/<minor>/kubectl) so the servers' cache key does not move.
        BinarySpec(
            "kubectl", "kubectl", "k8s.io/kubernetes/cmd/kubectl", "k8s.io/kubernetes", per_kubernetes_minor=True
        ),
        BinarySpec("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok", "sigs.k8s.io/kwok"),
        BinarySpec("helm", "helm", "helm.sh/helm/v3/cmd/helm", "helm.sh/helm/v3"),
        BinarySpec("helm4", "helm4", "helm.sh/helm/v4/cmd/helm", "helm.sh/helm/v4"),
        BinarySpec(
            "kubeconform", "kubeconform", "github.com/yannh/kubeconform/cmd/kubeconform", "github.com/yannh/kubeconform"
        ),
        # The peer of the side-by-side benchmark (tests/sidebyside, tox -e capsule): Capsule's manager, hack/capsule.
        BinarySpec(
            "capsule",
            ".",
            "github.com/projectcapsule/capsule/cmd/controller",
            "github.com/projectcapsule/capsule",
            hack_dir="capsule",
        ),
    )
}

# The binaries of the control plane proper (the rest are clients such as helm).
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager")

# Peers benchmarked side by side: built only when named (``python -m enclave_testing.binaries capsule``).
PEERS = ("capsule",)

_MINOR = re.compile(r"^\d+\.\d+$")


def supported_kubernetes_minors() -> list[str]:
    """Every minor pinned under hack/controlplane, oldest first: the range the project supports."""
    root = repo_root() / "hack" / "controlplane"
    found = [entry.name for entry in root.iterdir() if entry.is_dir() and _MINOR.match(entry.name)]
    return sorted(found, key=lambda minor: tuple(int(part) for part in minor.split(".")))


DEFAULT_KUBERNETES_MINOR: Final = "1.37"
"""What ``tox`` and ``tox -e up`` run on: the newest supported minor, once the whole integration suite had run on
it (docs/versions.md "Kubernetes versions" records that run)."""


def default_kubernetes_minor() -> str:
    """The minor ``tox`` and ``tox -e up`` run on (:data:`DEFAULT_KUBERNETES_MINOR`)."""
    return DEFAULT_KUBERNETES_MINOR


def selected_kubernetes_minor() -> str:
    """``ENCLAVE_KUBERNETES_VERSION`` as a supported minor, else the default; an unsupported one is an error."""
    wanted = os.environ.get("ENCLAVE_KUBERNETES_VERSION", "").strip().lstrip("v")
    if not wanted:
        return default_kubernetes_minor()
    minor = ".".join(wanted.split(".")[:2])
    supported = supported_kubernetes_minors()
    if minor not in supported:
        raise RuntimeError(
            f"ENCLAVE_KUBERNETES_VERSION={wanted}: not a supported Kubernetes minor (supported: {', '.join(supported)})"
        )
    if wanted != minor:
        pinned = pinned_version(BINARIES["kube-apiserver"], minor).lstrip("v")
        if pinned != wanted:
            raise RuntimeError(f"ENCLAVE_KUBERNETES_VERSION={wanted}: {minor} is pinned at {pinned}")
    return minor


def cache_root() -> Path:
    """``$ENCLAVE_CACHE_DIR`` or ``$XDG_CACHE_HOME/enclave`` or ``~/.cache/enclave``: never inside the work tree."""
    explicit = os.environ.get("ENCLAVE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "enclave"


def _module_dir(spec: BinarySpec, minor: str | None = None) -> Path:
    root = repo_root() / "hack" / spec.hack_dir
    if spec.per_kubernetes_minor:
        return root / (minor or selected_kubernetes_minor()) / spec.module_dir
    return root / spec.module_dir


def pinned_version(spec: BinarySpec, minor: str | None = None) -> str:
    """The version required in the module's go.mod: the single record of what we pin."""
    gomod = (_module_dir(spec, minor) / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(spec.pinned_module)}\s+(v\S+)", gomod, re.MULTILINE)
    if not match:
        raise RuntimeError(f"{spec.pinned_module} is not required in {_module_dir(spec, minor) / 'go.mod'}")
    return match.group(1)


def _sum_digest(spec: BinarySpec, minor: str | None) -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((_module_dir(spec, minor) / name).read_bytes())
    return digest.hexdigest()[:12]


def binary_path(name: str, minor: str | None = None) -> Path:
    """Where the cached binary lives (it may not be built yet); ``minor`` defaults to the selected one."""
    spec = BINARIES[name]
    return cache_root() / "bin" / f"{name}-{pinned_version(spec, minor)}-{_sum_digest(spec, minor)}" / name


def _origin(spec: BinarySpec, version: str, minor: str | None) -> tuple[str, str]:
    """Commit and release time of the pinned module, from the module proxy metadata (cached by Go)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{spec.pinned_module}@{version}"],
        cwd=_module_dir(spec, minor),
        capture_output=True,
        text=True,
        check=False,
    )
    commit, date = "unknown", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if out.returncode == 0:
        info = json.loads(out.stdout)
        commit = info.get("Origin", {}).get("Hash", commit)
        info_file = info.get("Info")
        if info_file and Path(info_file).exists():
            released = json.loads(Path(info_file).read_text()).get("Time")
            if released:
                date = released
    return commit, date


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """One build at a time per machine: tox -e up and a test session may start together."""
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / ".build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(spec: BinarySpec, target: Path, minor: str | None) -> None:
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain is needed to build the control plane; install Go 1.25 or newer")
    version = pinned_version(spec, minor)
    commit, build_date = _origin(spec, version, minor)
    ldflags = ["-s", "-w", *spec.version_ldflags(version, commit, build_date)]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=target.parent))
    env = {**os.environ, "CGO_ENABLED": "0"}
    cmd = ["go", "build", "-v", "-trimpath", "-ldflags", " ".join(ldflags), "-o", str(tmp / spec.name), spec.package]
    _log(f"building {spec.name} {version} (first build of a version takes minutes; progress below)")
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=_module_dir(spec, minor), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    last_report, tail = 0.0, list[str]()
    for compiled, line in enumerate(proc.stdout, start=1):
        tail = [*tail[-40:], line.rstrip()]
        if time.monotonic() - last_report > 15:
            last_report = time.monotonic()
            elapsed = int(time.monotonic() - started)
            _log(f"  {spec.name}: {compiled} packages compiled, {elapsed}s, now {line.strip()}")
    if proc.wait() != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"building {spec.name} failed:\n" + "\n".join(tail))
    os.replace(tmp / spec.name, target)
    shutil.rmtree(tmp, ignore_errors=True)
    _log(f"built {spec.name} {version} in {int(time.monotonic() - started)}s -> {target}")


def _log(message: str) -> None:
    print(f"[enclave-controlplane] {message}", file=sys.stderr, flush=True)


def ensure(*names: str, minor: str | None = None) -> dict[str, Path]:
    """Return paths of the named binaries (all when none named), building the missing ones.

    ``minor`` picks the Kubernetes release of the control-plane binaries (default: the selected one).
    """
    minor = minor or selected_kubernetes_minor()
    wanted = names or tuple(name for name in BINARIES if name not in PEERS)
    found: dict[str, Path] = {}
    missing = []
    for name in wanted:
        path = binary_path(name, minor)
        if path.exists():
            found[name] = path
        else:
            missing.append(name)
    if missing:
        with _build_lock():
            for name in missing:
                path = binary_path(name, minor)
                if not path.exists():  # another process may have built it while we waited
                    _build(BINARIES[name], path, minor)
                found[name] = path
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m enclave_testing.binaries [--kubernetes MINOR|all] [name ...]``: build or reuse, print the paths.

    ``--kubernetes all`` builds the control plane of every supported minor (what ``tox -e compat`` needs).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    minors: list[str | None] = [None]
    if args[:1] == ["--kubernetes"] and len(args) >= 2:
        chosen, args = args[1], args[2:]
        minors = list(supported_kubernetes_minors()) if chosen == "all" else [chosen.lstrip("v")]
    for minor in minors:
        for name, path in ensure(*(args or CONTROL_PLANE if minor else args), minor=minor).items():
            print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
