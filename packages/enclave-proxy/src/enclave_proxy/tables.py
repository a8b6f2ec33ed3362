"""The ``meta.k8s.io`` Table kubectl asks for (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``).

``kubectl get namespaces`` prints what the server renders: a list answered from the proxy's memory must
render it too, with kube-apiserver's columns (namespaces: Name, Status, Age; nodes: Name, Status, Roles, Age,
Version; the classes and PersistentVolumes as kube-apiserver's printers, GatewayClasses as its CRD's printer
columns) and its row objects
(``includeObject``: ``Metadata`` by default, ``Object`` or ``None``). Ages are formatted as kube's
``duration.HumanDuration``. Pure functions of the objects and the clock.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

NAMESPACE_COLUMNS: list[JSON] = [
    {
        "name": "Name",
        "type": "string",
        "format": "name",
        "description": "Name must be unique within a namespace.",
        "priority": 0,
    },
    {"name": "Status", "type": "string", "format": "", "description": "The status of the namespace", "priority": 0},
    {
        "name": "Age",
        "type": "string",
        "format": "",
        "description": "CreationTimestamp is a timestamp representing the server time when this object was created.",
        "priority": 0,
    },
]


def wants_table(accept: str) -> str | None:
    """The Table API version (``v1`` or ``v1beta1``) the Accept header asks for first, None for plain JSON."""
    for offer in accept.split(","):
        params = [part.strip() for part in offer.split(";")]
        if "as=Table" in params and "g=meta.k8s.io" in params:
            for version in ("v1", "v1beta1"):
                if f"v={version}" in params:
                    return version
    return None


def accepts_json(accept: str) -> bool:
    """Whether plain JSON is acceptable (kubectl and client-go always offer it; a protobuf-only client does not)."""
    if not accept.strip():
        return True
    for offer in accept.split(","):
        media = offer.split(";")[0].strip().lower()
        if media in ("application/json", "application/*", "*/*"):
            return True
    return False


def human_duration(seconds: float) -> str:
    """kube's ``duration.HumanDuration``: what the Age column shows."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def age(obj: JSON, now: datetime.datetime) -> str:
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return "<unknown>"
    try:
        when = datetime.datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    return human_duration((now - when).total_seconds())


def _row_object(obj: JSON, include: str, version: str) -> JSON | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": obj.get("metadata") or {},
    }


def _namespace_cells(obj: JSON, now: datetime.datetime) -> list[Any]:
    return [(obj.get("metadata") or {}).get("name", ""), (obj.get("status") or {}).get("phase", ""), age(obj, now)]


def _node_status(obj: JSON) -> str:
    ready = "Unknown"
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            ready = "Ready" if condition.get("status") == "True" else "NotReady"
    return ready + (",SchedulingDisabled" if (obj.get("spec") or {}).get("unschedulable") else "")


def _node_roles(obj: JSON) -> str:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    roles = {
        key.removeprefix("node-role.kubernetes.io/") for key in labels if key.startswith("node-role.kubernetes.io/")
    }
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    return ",".join(sorted(role for role in roles if role)) or "<none>"


def _node_cells(obj: JSON, now: datetime.datetime) -> list[Any]:
    version = ((obj.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [(obj.get("metadata") or {}).get("name", ""), _node_status(obj), _node_roles(obj), age(obj, now), version]


def _column(name: str, description: str, fmt: str = "", *, kind: str = "string", priority: int = 0) -> JSON:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


def _meta(obj: JSON) -> JSON:
    return obj.get("metadata") or {}


def _spec(obj: JSON) -> JSON:
    return obj.get("spec") or {}


def _default_name(obj: JSON, annotation: str) -> str:
    """The Name cell of a class that may be the cluster's default: ``standard (default)``, as kubectl shows it."""
    name = str(_meta(obj).get("name", ""))
    annotations = _meta(obj).get("annotations") or {}
    beta = annotation.replace(".kubernetes.io/", ".beta.kubernetes.io/")
    return f"{name} (default)" if "true" in (annotations.get(annotation), annotations.get(beta)) else name


def _storage_class_cells(obj: JSON, now: datetime.datetime) -> list[Any]:
    return [
        _default_name(obj, "storageclass.kubernetes.io/is-default-class"),
        obj.get("provisioner", ""),
        obj.get("reclaimPolicy") or "Delete",
        obj.get("volumeBindingMode") or "Immediate",
        bool(obj.get("allowVolumeExpansion")),
        age(obj, now),
    ]


def _ingress_class_cells(obj: JSON, now: datetime.datetime) -> list[Any]:
    parameters = _spec(obj).get("parameters")
    shown = "<none>"
    if parameters:
        shown = str(parameters.get("kind", ""))
        if parameters.get("apiGroup"):
            shown += "." + str(parameters["apiGroup"])
        shown += "/" + str(parameters.get("name", ""))
    return [
        _default_name(obj, "ingressclass.kubernetes.io/is-default-class"),
        _spec(obj).get("controller", ""),
        shown,
        age(obj, now),
    ]


def _priority_class_cells(obj: JSON, now: datetime.datetime) -> list[Any]:
    return [
        _meta(obj).get("name", ""),
        int(obj.get("value") or 0),
        bool(obj.get("globalDefault")),
        age(obj, now),
        obj.get("preemptionPolicy") or "PreemptLowerPriority",
    ]


def _runtime_class_cells(obj: JSON, now: datetime.datetime) -> list[Any]:
    return [_meta(obj).get("name", ""), obj.get("handler", ""), age(obj, now)]


def _gateway_class_cells(obj: JSON, now: datetime.datetime) -> list[Any]:
    accepted = "Unknown"
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Accepted":
            accepted = str(condition.get("status", "Unknown"))
    spec = _spec(obj)
    return [
        _meta(obj).get("name", ""),
        spec.get("controllerName", ""),
        accepted,
        age(obj, now),
        spec.get("description", ""),
    ]


_ACCESS_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}


def _volume_cells(obj: JSON, now: datetime.datetime) -> list[Any]:
    spec, status = _spec(obj), obj.get("status") or {}
    claim = spec.get("claimRef") or {}
    modes = [_ACCESS_MODES.get(mode, mode) for mode in spec.get("accessModes") or []]
    return [
        _meta(obj).get("name", ""),
        str((spec.get("capacity") or {}).get("storage", "")),
        ",".join(modes),
        spec.get("persistentVolumeReclaimPolicy", ""),
        status.get("phase", ""),
        f"{claim.get('namespace', '')}/{claim.get('name', '')}" if claim else "",
        spec.get("storageClassName", ""),
        spec.get("volumeAttributesClassName") or "<unset>",
        status.get("reason", ""),
        age(obj, now),
        spec.get("volumeMode") or "Filesystem",
    ]


@dataclass(frozen=True)
class TableSpec:
    """A kind's columns and how one object fills them (kube-apiserver's printers for the kind)."""

    columns: list[JSON]
    cells: Callable[[JSON, datetime.datetime], list[Any]]


NAMESPACE_TABLE = TableSpec(NAMESPACE_COLUMNS, _namespace_cells)
NODE_TABLE = TableSpec(
    [
        NAMESPACE_COLUMNS[0],
        _column("Status", "The status of the node"),
        _column("Roles", "The roles of the node"),
        NAMESPACE_COLUMNS[2],
        _column("Version", "Kubelet Version reported by the node."),
    ],
    _node_cells,
)
_NAME, _AGE = NAMESPACE_COLUMNS[0], NAMESPACE_COLUMNS[2]
STORAGE_CLASS_TABLE = TableSpec(
    [
        _NAME,
        _column("Provisioner", "Indicates the type of the provisioner."),
        _column(
            "ReclaimPolicy",
            "Dynamically provisioned PersistentVolumes of this storage class are created with this reclaimPolicy.",
        ),
        _column(
            "VolumeBindingMode",
            "VolumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.",
        ),
        _column("AllowVolumeExpansion", "AllowVolumeExpansion shows whether the storage class allow volume expand."),
        _AGE,
    ],
    _storage_class_cells,
)
INGRESS_CLASS_TABLE = TableSpec(
    [
        _NAME,
        _column("Controller", "Controller that is responsible for handling this class."),
        _column("Parameters", "A reference to a resource with additional parameters."),
        _AGE,
    ],
    _ingress_class_cells,
)
PRIORITY_CLASS_TABLE = TableSpec(
    [
        _NAME,
        _column("Value", "The value of this priority class.", kind="integer"),
        _column(
            "Global-Default",
            "globalDefault specifies whether this PriorityClass should be considered as the default priority.",
            kind="boolean",
        ),
        _AGE,
        _column("PreemptionPolicy", "PreemptionPolicy is the Policy for preempting pods with lower priority."),
    ],
    _priority_class_cells,
)
RUNTIME_CLASS_TABLE = TableSpec(
    [_NAME, _column("Handler", "Handler specifies the underlying runtime and configuration."), _AGE],
    _runtime_class_cells,
)
GATEWAY_CLASS_TABLE = TableSpec(
    [
        _NAME,
        _column("Controller", "", kind="string"),
        _column("Accepted", "", kind="string"),
        _column("Age", "", fmt="date"),
        _column("Description", "", priority=1),
    ],
    _gateway_class_cells,
)
"""A CRD's table: its additionalPrinterColumns (Gateway API's GatewayClass: Controller, Accepted, Age, and
Description at priority 1, shown by ``-o wide``)."""
VOLUME_TABLE = TableSpec(
    [
        _NAME,
        _column("Capacity", "capacity is the description of the persistent volume's resources and capacity."),
        _column("Access Modes", "accessModes contains all ways the volume can be mounted."),
        _column(
            "Reclaim Policy",
            "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.",
        ),
        _column("Status", "phase indicates if a volume is available, bound to a claim, or released by a claim."),
        _column(
            "Claim", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim."
        ),
        _column(
            "StorageClass", "storageClassName is the name of StorageClass to which this persistent volume belongs."
        ),
        _column("VolumeAttributesClass", "Name of VolumeAttributesClass to which this persistent volume belongs."),
        _column("Reason", "reason is a brief CamelCase string that describes any failure."),
        _AGE,
        _column(
            "VolumeMode",
            "volumeMode defines if a volume is intended to be used with a formatted filesystem.",
            priority=1,
        ),
    ],
    _volume_cells,
)


def table(
    spec: TableSpec,
    objects: Iterable[JSON],
    *,
    version: str,
    include: str,
    now: datetime.datetime,
    resource_version: str = "",
    columns: bool = True,
    continue_token: str = "",
) -> JSON:
    """A Table of ``objects`` as kube-apiserver renders it; ``columns=False`` leaves the definitions out (watch
    events after the first, as kube-apiserver sends them)."""
    rows = []
    for obj in objects:
        row: JSON = {"cells": spec.cells(obj, now)}
        shown = _row_object(obj, include, version)
        if shown is not None:
            row["object"] = shown
        rows.append(row)
    metadata: JSON = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    rendered: JSON = {"kind": "Table", "apiVersion": f"meta.k8s.io/{version}", "metadata": metadata}
    rendered["columnDefinitions"] = spec.columns if columns else None
    rendered["rows"] = rows
    return rendered
