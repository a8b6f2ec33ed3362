"""Install Enclave's CustomResourceDefinitions into a cluster and wait until they serve."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.paths import repo_root


def crd_dir() -> Path:
    return repo_root() / "charts" / "enclave" / "crds"


def install_crds(api: Any, directory: Path | None = None, timeout: float = 60.0) -> list[str]:
    """Create or replace every CRD in ``directory``; return their names once all are Established."""
    ext = client.ApiextensionsV1Api(api)
    names: list[str] = []
    for path in sorted((directory or crd_dir()).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            name = doc["metadata"]["name"]
            names.append(name)
            try:
                existing = ext.read_custom_resource_definition(name)
                doc["metadata"]["resourceVersion"] = existing.metadata.resource_version
                ext.replace_custom_resource_definition(name, doc)
            except ApiException as err:
                if err.status != 404:
                    raise
                ext.create_custom_resource_definition(doc)
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for name in sorted(pending):
            crd = ext.read_custom_resource_definition(name)
            conditions = {c.type: c.status for c in (crd.status.conditions or [])} if crd.status else {}
            if conditions.get("Established") == "True":
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"CRDs not Established after {timeout}s: {sorted(pending)}")
        if pending:
            time.sleep(0.1)
    # Discovery lags Established by a moment; the first custom-object call would otherwise 404.
    _wait_discovery(api, names, deadline + 30)
    return names


def _wait_discovery(api: Any, names: list[str], deadline: float) -> None:
    groups = {name.split(".", 1)[1] for name in names}
    apis = client.ApisApi(api)
    while True:
        served = {group.name for group in apis.get_api_versions().groups}
        if groups <= served or time.monotonic() > deadline:
            return
        time.sleep(0.1)
