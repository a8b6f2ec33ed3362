"""The ``meta.k8s.io`` Table kubectl asks for (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``).

``kubectl get namespaces`` prints what the server renders: a list answered from the proxy's memory must
render it too, with kube-apiserver's columns (namespaces: Name, Status, Age; nodes: Name, Status, Roles, Age,
Version) and its row objects
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


def _column(name: str, description: str, fmt: str = "") -> JSON:
    return {"name": name, "type": "string", "format": fmt, "description": description, "priority": 0}


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
