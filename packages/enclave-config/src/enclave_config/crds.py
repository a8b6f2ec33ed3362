"""Enclave's CustomResourceDefinitions as enclave-config keeps them: their definition, the conversion webhook's
client and CA (the spec's "CRD bundle"), and the storage-version migration.

Definition. Helm installs ``crds/`` on the first install and never again (charts/enclave/README.md says why
the chart keeps them there). So that an upgrade still brings the new schemas, versions and conversion, the
config process applies the CRDs generated from the models it ships with (the same ``crdgen`` output as
``crds/``), by server-side apply, whenever the digest it stamps on a CRD (:data:`CRD_DIGEST_ANNOTATION`) is not the
one of its own generation: once after an upgrade, never in steady state. The conversion client is not part of
the digest; it follows the configuration (below).

Conversion client. The CRDs ship pointing ``/convert`` at the chart's webhook Service; the configuration says
how kube-apiserver really reaches the admission server (``spec.admission.validating.client``, else the mutating
one), so the conversion client follows it: the same Service with ``/convert`` appended to its path, or the
same URL with ``/convert`` appended (the local harness uses ``https://127.0.0.1:<port>``). The CA is the
client's own ``caBundle`` when it gives one, else the CA of the TLS reconciler's Secret: the same rule as for
the webhook configurations. Without ``spec.admission`` only the CA is injected.

Storage migration. kube-apiserver records in ``status.storedVersions`` every version objects may still be
stored in. When that lists more than the storage version (objects written while v1beta1 was stored), every
object of the kind is rewritten unchanged (a merge patch carrying only its resourceVersion: kube-apiserver
encodes it again, in the storage version), then ``storedVersions`` is set to the storage version alone, so a
later release may stop serving the old version. A conflict or a deletion in between means the object was
written anyway.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final

from enclave_core.api import KINDS
from enclave_core.api.configuration import ServiceConfigurationSpec, WebhookClient
from enclave_core.api.crdgen import CONVERSION_PATH, crd_for
from enclave_core.api.names import CRD_DIGEST_ANNOTATION
from enclave_core.kube.rest import JSON

__all__ = ["CRD_PATH", "Migration", "conversion_patch", "definitions", "migration"]

CRD_PATH: Final = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _digest(crd: JSON) -> str:
    body = copy.deepcopy(crd)
    body["spec"]["conversion"]["webhook"].pop("clientConfig", None)
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


@functools.cache
def _generated() -> tuple[tuple[str, str, str], ...]:
    """(name, digest, JSON body) of every CRD of this release, generated once per process (it is not cheap)."""
    out = []
    for info in KINDS:
        crd = crd_for(info)
        out.append((info.crd_name, _digest(crd), json.dumps(crd)))
    return tuple(out)


def definitions(observed: dict[str, JSON], spec: ServiceConfigurationSpec, ca_pem: bytes | None) -> dict[str, JSON]:
    """The CRDs to apply (name to body): those missing or stamped with another digest than this release's.

    Each body carries the conversion client the CRD should have (from the one it has, else the generated one,
    adjusted to the configuration), so an apply never points conversion somewhere else for a moment.
    """
    wanted: dict[str, JSON] = {}
    for name, digest, text in _generated():
        generated: JSON = json.loads(text)
        current = observed.get(name)
        annotations = ((current or {}).get("metadata") or {}).get("annotations") or {}
        if annotations.get(CRD_DIGEST_ANNOTATION) == digest:
            continue
        generated["metadata"]["annotations"] = {CRD_DIGEST_ANNOTATION: digest}
        webhook = generated["spec"]["conversion"]["webhook"]
        existing = ((((current or {}).get("spec") or {}).get("conversion") or {}).get("webhook") or {}).get(
            "clientConfig"
        )
        webhook["clientConfig"] = _desired(existing or webhook["clientConfig"], spec, ca_pem)
        wanted[name] = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            **generated,
        }
    return wanted


def _client(spec: ServiceConfigurationSpec) -> WebhookClient | None:
    admission = spec.admission
    if admission is None:
        return None
    side = admission.validating or admission.mutating
    return side.client if side is not None else None


def _desired(current: JSON, spec: ServiceConfigurationSpec, ca_pem: bytes | None) -> JSON:
    """The clientConfig the CRD should have, from its current one and the configuration."""
    desired: JSON = copy.deepcopy(current)
    client = _client(spec)
    if client is not None and client.url is not None:
        desired.pop("service", None)
        desired["url"] = client.url.rstrip("/") + CONVERSION_PATH
    elif client is not None and client.service is not None:
        desired.pop("url", None)
        service = client.service
        desired["service"] = {
            "name": service.name,
            "namespace": service.namespace,
            "path": (service.path or "").rstrip("/") + CONVERSION_PATH,
            "port": service.port,
        }
    if client is not None and client.ca_bundle:
        desired["caBundle"] = client.ca_bundle
    elif ca_pem:
        desired["caBundle"] = base64.b64encode(ca_pem).decode()
    return desired


def conversion_patch(crd: JSON, spec: ServiceConfigurationSpec, ca_pem: bytes | None) -> JSON | None:
    """The merge patch that points ``crd``'s conversion webhook at the admission server; None when it does.

    CRDs converted by no webhook (strategy None, an older chart) are left alone.
    """
    conversion = (crd.get("spec") or {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        return None
    current: JSON = (conversion.get("webhook") or {}).get("clientConfig") or {}
    desired = _desired(current, spec, ca_pem)
    if desired == current:
        return None
    client_config: dict[str, Any] = dict(desired)
    for key in ("url", "service"):
        if key in current and key not in desired:
            client_config[key] = None  # merge patch: switch between url and service
    return {"spec": {"conversion": {"webhook": {"clientConfig": client_config}}}}


@dataclass(frozen=True)
class Migration:
    """Objects of one CRD to rewrite in its storage version, then ``storedVersions`` to trim."""

    crd: str
    group: str
    plural: str
    storage: str
    stale: tuple[str, ...]

    @property
    def list_path(self) -> str:
        return f"/apis/{self.group}/{self.storage}/{self.plural}"

    def object_path(self, obj: JSON) -> str:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace")
        scope = f"namespaces/{namespace}/" if namespace else ""
        return f"/apis/{self.group}/{self.storage}/{scope}{self.plural}/{meta.get('name')}"

    @property
    def status_path(self) -> str:
        return f"{CRD_PATH}/{self.crd}/status"


def migration(crd: JSON) -> Migration | None:
    """What ``crd`` needs migrated, or None when every object is stored in the storage version."""
    spec = crd.get("spec") or {}
    storage = next((v.get("name") for v in spec.get("versions") or [] if v.get("storage")), None)
    stored = list((crd.get("status") or {}).get("storedVersions") or [])
    if storage is None or not stored or stored == [storage]:
        return None
    return Migration(
        crd=str(crd["metadata"]["name"]),
        group=str(spec.get("group")),
        plural=str((spec.get("names") or {}).get("plural")),
        storage=str(storage),
        stale=tuple(version for version in stored if version != storage),
    )
