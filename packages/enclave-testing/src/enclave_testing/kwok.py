"""Simulated Nodes for the test control plane: KWOK plays every kubelet, kube-scheduler places the Pods.

Without a container runtime no Pod ever runs, so ``helm install --wait`` cannot finish and a ResourceQuota's
``used`` never sees a running Pod. KWOK (sigs.k8s.io/kwok, pinned in ``hack/controlplane/kwok`` and built like
the control plane) watches the Nodes annotated :data:`NODE_ANNOTATION` and the Pods bound to them, and moves
their status along *stages*: a Node becomes Ready, a bound Pod becomes Running and Ready, a deleted Pod goes
away. The stages are the ones the pinned kwok release ships (its ``kustomize/stage/{node,pod}/fast``), read
from the Go module cache, so they always match the binary.

Opt in with ``ControlPlane(..., simulated_nodes=N)``: the control plane then also runs kube-scheduler (from the
pinned Kubernetes module), kwok, and the deployment controller, and creates N Nodes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from enclave_testing.paths import repo_root

NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""Nodes with ``kwok.x-k8s.io/node: fake`` are the ones kwok manages (its documented convention)."""
NODE_LABEL = "enclave.dev/simulated-node"
"""Our own label on the Nodes we create, so tests can select or clean them up."""
POD_CIDR = "10.64.0.0/10"
"""Pod IPs kwok hands out: room for millions of Pods (its default /24 runs out at 254), clear of the
control plane's Service range."""

STAGES = (
    "node/fast/node-initialize.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
"""The stages kwok runs: Nodes become Ready at once; Pods bound to them Running and Ready; a Job's Pods
complete; deleted Pods are removed. No heartbeats: nothing here marks a silent Node NotReady."""


def module_dir() -> Path:
    """The pinned kwok module's source in the Go module cache (downloaded through the module proxy if absent)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", "sigs.k8s.io/kwok"],
        cwd=repo_root() / "hack" / "controlplane" / "kwok",
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"cannot locate the pinned kwok module (go mod download): {out.stderr.strip()[-500:]}")
    directory = Path(json.loads(out.stdout)["Dir"])
    return directory


def stage_files() -> list[Path]:
    """The stage definitions of the pinned kwok release, passed to kwok with ``--config``."""
    root = module_dir() / "kustomize" / "stage"
    found = [root / stage for stage in STAGES]
    missing = [str(path) for path in found if not path.is_file()]
    if missing:
        raise RuntimeError(f"the pinned kwok module lacks its stages: {', '.join(missing)}")
    return found


def node_body(name: str) -> dict[str, Any]:
    """A Node for kwok to manage: annotated for kwok, labelled as ours; kwok fills in status and capacity."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {NODE_ANNOTATION: "fake"},
            "labels": {
                NODE_LABEL: "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
    }


def ready(node: Any) -> bool:
    """Whether kwok has reported the Node Ready (its node-initialize stage ran)."""
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)
