"""Conversion between ``enclave.dev/v1beta1`` and ``enclave.dev/v1beta2``: pure functions on JSON objects.

kube-apiserver stores every Enclave kind as v1beta2 and asks the conversion webhook (``/convert`` on the
admission server) whenever a client reads or writes another version. :func:`review` answers one
ConversionReview; :func:`convert` converts one object.

Fidelity. The natural mapping of each kind (:class:`KindConversion`) moves fields between the two layouts
(docs/versions.md has the table). Where the target cannot hold something the source has (Tenant
``spec.rules``, ServiceConfiguration ``spec.rules`` and both kinds' ``spec.proxy`` have no v1beta1 field, ``users`` entries of kind ServiceAccount
become plain user names, an explicitly empty list has no counterpart), the source ``spec`` travels in the
annotation :data:`CONVERSION_ANNOTATION` of the converted object. Converting back, when the object still says
what the saved spec would say (nobody edited it in between), the saved spec is restored exactly; when it was
edited, the edited fields win and the fields only the saved version can hold (Tenant ``rules``,
ServiceConfiguration ``admission`` and ``rules``, both kinds' ``proxy``) are carried over. So v1beta1 -> v1beta2 -> v1beta1
and v1beta2 -> v1beta1 -> v1beta2 give back every field.

Bad input. A v1beta1 object that cannot be represented in v1beta2 raises :class:`ConversionError` naming
the field; kube-apiserver then refuses the write, so nothing is stored half-converted. A review is answered
all or nothing: one object that fails fails the review, never a shorter list.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from enclave_core import API_GROUP
from enclave_core.api.names import CONVERSION_ANNOTATION
from enclave_core.api.v1beta1.configuration import MAX_USERS

__all__ = [
    "HUB",
    "SPOKE",
    "VERSIONS",
    "ConversionError",
    "KindConversion",
    "convert",
    "review",
]

HUB: Final = f"{API_GROUP}/v1beta2"
"""The storage version, the one controllers read."""
SPOKE: Final = f"{API_GROUP}/v1beta1"
"""The older version, served and converted."""
VERSIONS: Final = (SPOKE, HUB)

Spec = dict[str, Any]


class ConversionError(ValueError):
    """An object that cannot be converted; ``field`` is its path, as kube-apiserver's own errors name fields."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class KindConversion:
    """The natural mapping of one kind's ``spec``, and the v1beta2 fields v1beta1 has no place for."""

    up: Callable[[Spec], Spec]
    """v1beta1 spec to v1beta2 spec; raises ConversionError when v1beta2 cannot represent it."""
    down: Callable[[Spec], Spec]
    """v1beta2 spec to v1beta1 spec; total (what does not fit is saved in the annotation)."""
    hub_only: tuple[str, ...] = ()
    """Top-level v1beta2 spec fields with no v1beta1 counterpart, kept across edits made through v1beta1."""


# -- Tenant -----------------------------------------------------------------------------------------------

_TENANT_MOVES: Final = (
    ("namespaceQuota", "quota"),
    ("forbiddenNamespaceLabels", "forbiddenLabels"),
    ("forbiddenNamespaceAnnotations", "forbiddenAnnotations"),
)
_METADATA_MOVES: Final = (("additionalLabels", "labels"), ("additionalAnnotations", "annotations"))


def _tenant_up(spec: Spec) -> Spec:
    out: Spec = {}
    options: Spec = {}
    for key, value in spec.items():
        old = dict(_TENANT_MOVES)
        if key in old:
            options[old[key]] = copy.deepcopy(value)
        elif key == "namespacesMetadata":
            options["additionalMetadata"] = {
                new: copy.deepcopy(value[old_key]) for old_key, new in _METADATA_MOVES if old_key in value
            }
        else:
            out[key] = copy.deepcopy(value)
    if options:
        out["namespaceOptions"] = options
    return out


_TENANT_HUB_ONLY: Final = ("rules", "proxy")
_CONFIGURATION_HUB_ONLY: Final = ("admission", "proxy", "rules")


def _tenant_down(spec: Spec) -> Spec:
    out: Spec = {}
    for key, value in spec.items():
        if key == "namespaceOptions":
            for old, new in _TENANT_MOVES:
                if new in value:
                    out[old] = copy.deepcopy(value[new])
            if "additionalMetadata" in value:
                metadata = value["additionalMetadata"]
                out["namespacesMetadata"] = {
                    old: copy.deepcopy(metadata[new]) for old, new in _METADATA_MOVES if new in metadata
                }
        elif key not in _TENANT_HUB_ONLY:
            out[key] = copy.deepcopy(value)
    return out


# -- ServiceConfiguration ---------------------------------------------------------------------------------


def _configuration_up(spec: Spec) -> Spec:
    out = {key: copy.deepcopy(value) for key, value in spec.items() if key not in ("userGroups", "userNames")}
    groups, names = spec.get("userGroups") or [], spec.get("userNames") or []
    if len(groups) + len(names) > MAX_USERS:
        raise ConversionError(
            "spec.userGroups",
            f"{len(groups)} groups and {len(names)} user names: enclave.dev/v1beta2 spec.users holds at most "
            f"{MAX_USERS} entries",
        )
    if "userGroups" in spec or "userNames" in spec:
        out["users"] = [{"kind": "Group", "name": group} for group in groups] + [
            {"kind": "User", "name": name} for name in names
        ]
    return out


def _configuration_down(spec: Spec) -> Spec:
    dropped = ("users", "userGroups", "userNames", *_CONFIGURATION_HUB_ONLY)
    out = {key: copy.deepcopy(value) for key, value in spec.items() if key not in dropped}
    users = spec.get("users") or []
    groups = [entity["name"] for entity in users if entity.get("kind") == "Group"]
    names = [entity["name"] for entity in users if entity.get("kind") != "Group"]
    groups += spec.get("userGroups") or []
    names += spec.get("userNames") or []
    if groups or "userGroups" in spec:
        out["userGroups"] = groups
    if names or "userNames" in spec:
        out["userNames"] = names
    return out


CONVERSIONS: Final[Mapping[str, KindConversion]] = {
    "Tenant": KindConversion(_tenant_up, _tenant_down, hub_only=_TENANT_HUB_ONLY),
    "ServiceConfiguration": KindConversion(_configuration_up, _configuration_down, hub_only=_CONFIGURATION_HUB_ONLY),
}
"""Kinds whose shapes differ; every other kind converts by changing ``apiVersion`` alone."""


# -- one object -------------------------------------------------------------------------------------------


def _saved(obj: Mapping[str, Any], strict: bool) -> dict[str, Any] | None:
    """The conversion annotation of ``obj``, parsed; a malformed one is refused (strict) or ignored."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(CONVERSION_ANNOTATION)
    if raw is None:
        return None
    try:
        saved = json.loads(raw)
    except ValueError:
        saved = None
    if not (isinstance(saved, dict) and saved.get("apiVersion") in VERSIONS and isinstance(saved.get("spec"), dict)):
        if strict:
            raise ConversionError(
                f"metadata.annotations[{CONVERSION_ANNOTATION}]",
                "not the conversion data Enclave writes; remove the annotation (it is managed by conversion)",
            )
        return None
    return saved


def _natural(conversion: KindConversion, spec: Spec, target: str) -> Spec:
    return conversion.up(spec) if target == HUB else conversion.down(spec)


def convert(obj: Mapping[str, Any], target: str) -> dict[str, Any]:
    """``obj`` converted to ``target`` (``enclave.dev/v1beta1`` or ``/v1beta2``); a fresh object.

    Only ``apiVersion``, ``spec`` and the annotation :data:`CONVERSION_ANNOTATION` change; ``metadata`` otherwise and
    ``status`` are copied (kube-apiserver refuses a conversion that touches other metadata).
    """
    source = obj.get("apiVersion")
    if source not in VERSIONS:
        raise ConversionError("apiVersion", f"{source!r} is not one of {', '.join(VERSIONS)}")
    if target not in VERSIONS:
        raise ConversionError("apiVersion", f"cannot convert to {target!r}; versions: {', '.join(VERSIONS)}")
    out = copy.deepcopy(dict(obj))
    out["apiVersion"] = target
    conversion = CONVERSIONS.get(str(obj.get("kind")))
    if source == target or conversion is None:
        return out
    # Writes arrive as v1beta1 and go up: a malformed annotation there is the user's to fix, so refuse it.
    # Reads go down from storage, where a bad annotation must not make the object unreadable.
    saved = _saved(obj, strict=target == HUB)
    metadata = out.setdefault("metadata", {})
    annotations = dict(metadata.get("annotations") or {})
    annotations.pop(CONVERSION_ANNOTATION, None)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        result = _natural(conversion, spec, target)
        if saved is not None and saved["apiVersion"] == target:
            if _natural(conversion, saved["spec"], source) == spec:
                result = copy.deepcopy(saved["spec"])  # unchanged since it was converted: restore it whole
            elif target == HUB:
                for key in conversion.hub_only:  # edited through v1beta1: keep what only v1beta2 can hold
                    if key in saved["spec"] and key not in result:
                        result[key] = copy.deepcopy(saved["spec"][key])
        out["spec"] = result
        if _natural(conversion, result, source) != spec:
            annotations[CONVERSION_ANNOTATION] = json.dumps(
                {"apiVersion": source, "spec": spec}, sort_keys=True, separators=(",", ":")
            )
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    return out


# -- the webhook ------------------------------------------------------------------------------------------


def review(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ConversionReview (apiextensions.k8s.io/v1) answering ``body``: every object converted, or a failure.

    A failure names the object and the field; ``convertedObjects`` is then absent, never partial.
    """
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise ValueError("a ConversionReview with no request")
    uid = str(request.get("uid", ""))
    target = str(request.get("desiredAPIVersion", ""))
    objects = request.get("objects") or []
    failure = _convert_all(objects, target)
    if isinstance(failure, str):
        response: dict[str, Any] = {"uid": uid, "result": {"status": "Failure", "message": failure}}
    else:
        response = {"uid": uid, "convertedObjects": failure, "result": {"status": "Success"}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response}


def _convert_all(objects: Any, target: str) -> list[dict[str, Any]] | str:
    """Every object converted, or the message of the first that cannot be (naming it and the field)."""
    if not isinstance(objects, list):
        return "request.objects: not a list"
    converted: list[dict[str, Any]] = []
    for obj in objects:
        if not isinstance(obj, Mapping):
            return "request.objects: an entry is not an object"
        try:
            converted.append(convert(obj, target))
        except ConversionError as err:
            meta = obj.get("metadata") or {}
            name = "/".join(str(part) for part in (meta.get("namespace"), meta.get("name")) if part)
            return f"{obj.get('kind')} {name}: {err}"
    return converted
