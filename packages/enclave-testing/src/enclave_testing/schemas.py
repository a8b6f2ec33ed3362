"""JSON schemas for kubeconform, made locally from the pinned kube-apiserver's OpenAPI and from our CRDs.

kubeconform validates manifests against one JSON schema per kind, in the layout of
github.com/yannh/kubernetes-json-schema: ``<dir>/v<version>-standalone-strict/<kind><suffix>.json``, where
``<suffix>`` is ``-<first label of the group>-<version>`` (``deployment-apps-v1.json``, ``configmap-v1.json``,
``tenant-enclave-v1beta2.json``). Those published schemas are fetched from GitHub, which offline machines cannot
reach, and follow releases rather than the exact apiserver we test against; so the tests make them from what
that apiserver serves at ``/openapi/v2`` (every built-in kind of the pinned release), and from the
``openAPIV3Schema`` of each served version of the CRDs in ``charts/enclave/crds``.

"Standalone" means a file needs no other: the kind's definition sits at the root and every definition it
reaches is copied under ``definitions`` (``$ref`` stays document-local, which also keeps recursive types, such
as a CRD's own ``JSONSchemaProps``, finite). "Strict" adds ``additionalProperties: false`` to every object
schema that lists its properties, so a misspelt or misplaced field is an error, as
``fieldValidation=Strict`` makes it on the apiserver. What the apiserver accepts beyond plain JSON types is
kept accepted: an ``int-or-string`` is either, a ``Quantity`` is a string or a number (``cpu: 1``), and a
field the schema marks nullable, or any optional field, may be ``null`` (the apiserver drops it), and a required
field with a ``default`` may be left out (the apiserver defaults before it validates).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

Schema = dict[str, Any]

QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_REF_PREFIX = "#/definitions/"
_DROPPED = ("description", "x-kubernetes-group-version-kind")


def file_name(api_version: str, kind: str) -> str:
    """kubeconform's name for a kind's schema file (``{{ .ResourceKind }}{{ .KindSuffix }}.json``)."""
    group, _, version = api_version.rpartition("/")
    suffix = f"-{group.split('.')[0].lower()}-{version.lower()}" if group else f"-{version.lower()}"
    return f"{kind.lower()}{suffix}.json"


def layout_dir(root: Path, kubernetes_version: str) -> Path:
    """Where kubeconform looks with ``-schema-location <root> -kubernetes-version <version> -strict``."""
    return root / f"v{kubernetes_version.lstrip('v')}-standalone-strict"


def _nullable(schema: Schema) -> Schema:
    """``schema`` that also accepts ``null``."""
    if "$ref" in schema or "anyOf" in schema or "oneOf" in schema or "type" not in schema:
        return {"anyOf": [schema, {"type": "null"}]} if schema else schema
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if "null" not in types:
        schema = {**schema, "type": [*types, "null"]}
    if "enum" in schema and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
    return schema


def convert(schema: Any, *, strict: bool = True) -> Any:
    """An OpenAPI (v2 definition or CRD v3) schema as a plain JSON schema kubeconform's validator enforces."""
    if isinstance(schema, list):
        return [convert(item, strict=strict) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: Schema = {}
    for key, value in schema.items():
        if key in _DROPPED or key == "nullable":
            continue
        if key == "properties":
            out[key] = {name: convert(sub, strict=strict) for name, sub in value.items()}
        elif key == "$ref":
            out[key] = value
        else:
            out[key] = convert(value, strict=strict)
    if out.pop("format", None) == "int-or-string" or out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out = {**out, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    elif "format" in schema:
        out["format"] = schema["format"]
    if "properties" in out:
        # The apiserver fills in a property's default before it validates: one with a default is never missing.
        defaulted = {
            name for name, sub in schema["properties"].items() if isinstance(sub, Mapping) and "default" in sub
        }
        if "required" in out:
            out["required"] = [name for name in out["required"] if name not in defaulted]
            if not out["required"]:
                del out["required"]
        required = set(out.get("required", []))
        out["properties"] = {
            name: sub if name in required else _nullable(sub) for name, sub in out["properties"].items()
        }
        preserve = out.get("x-kubernetes-preserve-unknown-fields", False)
        if strict and not preserve and "additionalProperties" not in out:
            out["additionalProperties"] = False
    if schema.get("nullable"):
        out = _nullable(out)
    return out


def _refs(schema: Any) -> Iterable[str]:
    if isinstance(schema, Mapping):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            yield ref.removeprefix(_REF_PREFIX)
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _refs(item)


def _special(name: str) -> Schema | None:
    if name == QUANTITY:
        return {"anyOf": [{"type": "string"}, {"type": "number"}]}
    if name == INT_OR_STRING:
        return {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    return None


def convert_definitions(definitions: Mapping[str, Schema], *, strict: bool = True) -> dict[str, Schema]:
    """Every definition converted once (kinds share most of theirs)."""
    converted = {name: _special(name) or convert(schema, strict=strict) for name, schema in definitions.items()}
    for name in (QUANTITY, INT_OR_STRING):
        converted.setdefault(name, _special(name) or {})
    return converted


def standalone(converted: Mapping[str, Schema], name: str) -> Schema:
    """Definition ``name`` at the root, with every definition it reaches under ``definitions``."""
    reached: dict[str, Schema] = {}
    pending = [name]
    while pending:
        current = pending.pop()
        if current not in reached:
            reached[current] = converted[current]
            pending.extend(ref for ref in _refs(converted[current]) if ref not in reached)
    root = {**reached.pop(name), "$schema": "http://json-schema.org/draft-07/schema#"}
    if reached:
        root["definitions"] = {key: reached[key] for key in sorted(reached)}
    return root


def _api_version(gvk: Mapping[str, str]) -> str:
    return f"{gvk['group']}/{gvk['version']}" if gvk.get("group") else gvk["version"]


NOT_MANIFESTS = {"WatchEvent", "DeleteOptions"}
"""Kinds stamped on meta types for every group version; no manifest is one."""


def from_openapi_v2(document: Mapping[str, Any], *, strict: bool = True) -> dict[str, Schema]:
    """file name -> standalone schema, for every kind ``/openapi/v2`` defines."""
    definitions: Mapping[str, Schema] = document["definitions"]
    converted = convert_definitions(definitions, strict=strict)
    schemas: dict[str, Schema] = {}
    for name, definition in sorted(definitions.items()):
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            if gvk["kind"] not in NOT_MANIFESTS:
                schemas[file_name(_api_version(gvk), gvk["kind"])] = standalone(converted, name)
    return schemas


def from_crds(crds: Iterable[Mapping[str, Any]], *, strict: bool = True) -> dict[str, Schema]:
    """file name -> standalone schema, for every served version of each CustomResourceDefinition."""
    schemas: dict[str, Schema] = {}
    for crd in crds:
        if crd.get("kind") != "CustomResourceDefinition":
            continue
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served", True):
                continue
            root = convert(version["schema"]["openAPIV3Schema"], strict=strict)
            root.setdefault("$schema", "http://json-schema.org/draft-07/schema#")
            schemas[file_name(f"{group}/{version['name']}", kind)] = root
    return schemas


def load_crds(directory: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        found.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return found


def write(schemas: Mapping[str, Schema], directory: Path) -> Path:
    """Write each schema as ``directory/<file name>``; returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for file, schema in schemas.items():
        (directory / file).write_text(json.dumps(schema, separators=(",", ":"), sort_keys=True))
    return directory
