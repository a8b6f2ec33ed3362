"""Pin one Kubernetes release for the test control plane: ``python hack/controlplane/pin.py 1.37.2 3.7.0``.

``--only etcd`` (or ``--only kubernetes``, or ``--only kubectl``) rewrites one of the modules and leaves the
others, and so their cached builds, alone.

Writes ``hack/controlplane/<minor>/kubernetes`` (kube-apiserver, kube-controller-manager and kube-scheduler from
``k8s.io/kubernetes``), ``hack/controlplane/<minor>/kubectl`` (kubectl from the same release, a module of its
own so that adding the client does not change the server's ``go.sum`` and with it the cache key of every
control-plane build) and ``hack/controlplane/<minor>/etcd`` (the etcd server), each a Go module with its
``go.sum``, then lets ``go mod tidy`` resolve them through the module proxy. The etcd version is the one the
release pairs with (kubeadm's ``DefaultEtcdVersion`` in ``cmd/kubeadm/app/constants/constants.go``; printed
here so a bump does not need to look it up by hand).

``k8s.io/kubernetes`` cannot be required like an ordinary module: its go.mod points the staging modules
(``k8s.io/api`` ...) at ``./staging``, so every one of them is replaced by its published ``v0.<minor>.<patch>``.
The list comes from the release's own go.mod, so new staging modules are picked up.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

TOOLS = """//go:build tools

// Package tools pins the commands this module builds, so `go mod tidy` keeps their dependencies.
package tools

import (
\t_ "k8s.io/kubernetes/cmd/kube-apiserver"
\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"
\t_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
"""

KUBECTL_TOOLS = """//go:build tools

// Package tools pins the command this module builds, so `go mod tidy` keeps its dependencies.
package tools

import (
\t_ "k8s.io/kubernetes/cmd/kubectl"
)
"""

ETCD_MAIN = """// Command etcd is the pinned etcd server of Enclave's test control plane, built from the published module.
package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
\tetcdmain.Main(os.Args)
}
"""


def _download(module: str, version: str) -> dict[str, str]:
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True, check=True
    )
    info: dict[str, str] = json.loads(out.stdout)
    return info


def _go_directive(gomod: str) -> str:
    match = re.search(r"^go (\S+)", gomod, re.MULTILINE)
    return match.group(1) if match else "1.25.0"


def pin(kubernetes: str, etcd: str, only: str = "") -> None:
    kubernetes, etcd = kubernetes.lstrip("v"), etcd.lstrip("v")
    minor = ".".join(kubernetes.split(".")[:2])
    info = _download("k8s.io/kubernetes", f"v{kubernetes}")
    upstream = Path(info["GoMod"]).read_text()
    staging = re.findall(r"^\s*(k8s\.io/[\w.-]+) => \./staging/", upstream, re.MULTILINE)
    paired = re.search(
        r'DefaultEtcdVersion = "([\d.]+)', (Path(info["Dir"]) / "cmd/kubeadm/app/constants/constants.go").read_text()
    )
    print(f"Kubernetes {kubernetes} pairs with etcd {paired.group(1) if paired else '?'} (kubeadm); pinning {etcd}")

    written = []
    for name, tools in (("kubernetes", TOOLS), ("kubectl", KUBECTL_TOOLS)):
        if only in ("", name):
            written.append(_pin_kubernetes(HERE / minor / name, minor, kubernetes, upstream, staging, tools))
    etcd_dir = HERE / minor / "etcd"
    if only in ("", "etcd"):
        _pin_etcd(etcd_dir, minor, etcd)
        written.append(etcd_dir)
    print("pinned " + ", ".join(str(path) for path in written))


def _pin_kubernetes(kube_dir: Path, minor: str, kubernetes: str, upstream: str, staging: list[str], tools: str) -> Path:
    kube_dir.mkdir(parents=True, exist_ok=True)
    staging_version = f"v0.{kubernetes.split('.', 1)[1]}"
    replaces = "\n".join(f"\t{name} => {name} {staging_version}" for name in staging)
    (kube_dir / "go.mod").write_text(
        f"module enclave.dev/hack/controlplane/{minor}/{kube_dir.name}\n\ngo {_go_directive(upstream)}\n\n"
        f"require k8s.io/kubernetes v{kubernetes}\n\nreplace (\n{replaces}\n)\n"
    )
    (kube_dir / "tools.go").write_text(tools)
    subprocess.run(["go", "mod", "tidy"], cwd=kube_dir, check=True)
    return kube_dir


def _pin_etcd(etcd_dir: Path, minor: str, etcd: str) -> None:
    etcd_dir.mkdir(parents=True, exist_ok=True)
    etcd_info = _download("go.etcd.io/etcd/server/v3", f"v{etcd}")
    (etcd_dir / "go.mod").write_text(
        f"module enclave.dev/hack/controlplane/{minor}/etcd\n\ngo {_go_directive(Path(etcd_info['GoMod']).read_text())}"
        f"\n\nrequire go.etcd.io/etcd/server/v3 v{etcd}\n"
    )
    (etcd_dir / "main.go").write_text(ETCD_MAIN)
    subprocess.run(["go", "mod", "tidy"], cwd=etcd_dir, check=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    only = ""
    if len(args) == 4 and args[2] == "--only" and args[3] in ("etcd", "kubernetes", "kubectl"):
        only, args = args[3], args[:2]
    if len(args) != 2:
        raise SystemExit(__doc__)
    pin(args[0], args[1], only)
