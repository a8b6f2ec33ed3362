"""The Gateway API CustomResourceDefinitions the integration tests install, from a pinned Go module.

Tenant ingress rules govern Gateway API hostnames (Gateway and ListenerSet listeners, HTTPRoute, GRPCRoute and
TLSRoute ``hostnames``), so the tests need those kinds served by kube-apiserver exactly as a cluster that
installed the upstream release serves them, with the upstream schemas and CEL validation rules. The release is
pinned like the control plane: ``hack/gatewayapi/go.mod`` requires ``sigs.k8s.io/gateway-api`` at one version
and ``hack/gatewayapi/go.sum`` holds its hash. The module zip comes through the Go module proxy
(``go mod download``, which verifies it against go.sum; the hash is compared here again so a go.sum that lost
the line cannot let an unverified download through), and the standard channel's CRDs
(``config/crd/standard``) are copied into a cache outside the work tree keyed by version and go.sum, so a
second session costs a stat call. The channel's ValidatingAdmissionPolicy (safe upgrades between channels)
is not a CRD and is left out: it guards CRD upgrades, which the tests never do.

Bumping the release: change the version in ``hack/gatewayapi/go.mod`` and run ``go mod download`` in that
directory (it writes the new go.sum lines).
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
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

from enclave_testing.binaries import cache_root
from enclave_testing.paths import repo_root

MODULE = "sigs.k8s.io/gateway-api"
CHANNEL = "standard"


def module_dir() -> Path:
    return repo_root() / "hack" / "gatewayapi"


def pinned_version() -> str:
    """The version required in hack/gatewayapi/go.mod: the single record of the pinned release."""
    gomod = (module_dir() / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(MODULE)}\s+(v\S+)", gomod, re.MULTILINE)
    if not match:
        raise RuntimeError(f"{MODULE} is not required in {module_dir() / 'go.mod'}")
    return match.group(1)


def _pinned_sum(version: str) -> str:
    """The module zip's hash recorded in go.sum (``h1:...``)."""
    for line in (module_dir() / "go.sum").read_text().splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] == MODULE and fields[1] == version:
            return fields[2]
    raise RuntimeError(f"{MODULE} {version} has no hash in {module_dir() / 'go.sum'}")


def crd_directory() -> Path:
    """Where the pinned release's standard-channel CRDs are cached (they may not be there yet)."""
    version = pinned_version()
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((module_dir() / name).read_bytes())
    return cache_root() / "crds" / f"gateway-api-{version}-{digest.hexdigest()[:12]}" / CHANNEL


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """One fetch at a time per machine (its own lock: it must not wait behind a control-plane build)."""
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / ".crds.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download(version: str) -> Path:
    """The verified module's extracted directory in Go's module cache."""
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain is needed to fetch the Gateway API CRDs; install Go 1.25 or newer")
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
        cwd=module_dir(),
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GOFLAGS": "-mod=readonly"},
    )
    if out.returncode != 0:
        raise RuntimeError(f"go mod download {MODULE}@{version} failed: {out.stderr or out.stdout}")
    info = json.loads(out.stdout)
    if info.get("Error"):
        raise RuntimeError(f"go mod download {MODULE}@{version}: {info['Error']}")
    expected = _pinned_sum(version)
    if info.get("Sum") != expected:
        raise RuntimeError(f"{MODULE}@{version} hashes to {info.get('Sum')}, go.sum pins {expected}")
    return Path(info["Dir"])


def ensure_crds() -> Path:
    """The directory of the pinned release's standard-channel CRD files, fetched and cached on first use."""
    target = crd_directory()
    if target.is_dir():
        return target
    with _lock():
        if target.is_dir():  # another session filled it while we waited
            return target
        source = _download(pinned_version()) / "config" / "crd" / CHANNEL
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".gateway-api-", dir=target.parent))
        for path in sorted(source.glob("*.yaml")):
            docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
            if docs and all(doc.get("kind") == "CustomResourceDefinition" for doc in docs):
                shutil.copyfile(path, staging / path.name)
        os.replace(staging, target)
    return target
