"""What a field manager owns on an object, read from ``metadata.managedFields``.

Server-side apply removes a field only when the applying manager owned it and no longer states it. A
controller that compares desired state against the live object must therefore also notice fields it *owns*
but no longer wants (a label dropped from a spec), or it would skip the apply that removes them. The
``fieldsV1`` format is documented in the Kubernetes API reference ("FieldsV1"): ``f:<name>`` for a field,
``k:<json>`` for a list item keyed by its map keys.
"""

from __future__ import annotations

import json
from typing import Any

from enclave_core.kube.rest import JSON

__all__ = ["applied_fields", "owned_keys", "owned_list_keys"]


def applied_fields(obj: JSON, manager: str) -> dict[str, Any]:
    """The merged ``fieldsV1`` of every ``Apply`` entry of ``manager`` (any subresource but status)."""
    merged: dict[str, Any] = {}
    for entry in obj.get("metadata", {}).get("managedFields") or []:
        if entry.get("manager") != manager or entry.get("operation") != "Apply":
            continue
        if entry.get("subresource"):
            continue
        _merge(merged, entry.get("fieldsV1") or {})
    return merged


def _merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, dict):
            _merge(into.setdefault(key, {}), value)
        else:
            into.setdefault(key, value)


def owned_keys(obj: JSON, manager: str, *path: str) -> set[str]:
    """Map keys ``manager`` applied under ``path``, e.g. ``owned_keys(ns, m, "metadata", "labels")``."""
    node = applied_fields(obj, manager)
    for part in path:
        node = node.get(f"f:{part}", {})
    return {key[2:] for key in node if key.startswith("f:")}


def owned_list_keys(obj: JSON, manager: str, *path: str) -> list[dict[str, Any]]:
    """Keys of the associative-list items ``manager`` applied under ``path`` (``[{"uid": ...}]`` for refs)."""
    node = applied_fields(obj, manager)
    for part in path:
        node = node.get(f"f:{part}", {})
    keys: list[dict[str, Any]] = []
    for key in node:
        if key.startswith("k:"):
            try:
                keys.append(json.loads(key[2:]))
            except ValueError:
                continue
    return keys
