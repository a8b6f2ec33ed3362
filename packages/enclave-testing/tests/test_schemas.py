"""enclave_testing.schemas: OpenAPI definitions and CRDs into kubeconform's standalone-strict layout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from enclave_testing import schemas

OPENAPI: dict[str, Any] = {
    "definitions": {
        "io.k8s.api.apps.v1.Deployment": {
            "description": "Deployment enables declarative updates for Pods and ReplicaSets.",
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
                "spec": {"$ref": "#/definitions/io.k8s.api.apps.v1.DeploymentSpec"},
            },
            "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "Deployment", "version": "v1"}],
        },
        "io.k8s.api.apps.v1.DeploymentSpec": {
            "type": "object",
            "required": ["selector"],
            "properties": {
                "replicas": {"type": "integer", "format": "int32"},
                "selector": {"type": "object"},
                "strategy": {
                    "type": "object",
                    "properties": {
                        "maxSurge": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"}
                    },
                },
                "resources": {
                    "type": "object",
                    "additionalProperties": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity"},
                },
            },
        },
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "labels": {"type": "object"}},
        },
        "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
        "io.k8s.api.core.v1.ConfigMap": {
            "type": "object",
            "properties": {"data": {"type": "object", "additionalProperties": {"type": "string"}}},
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}],
        },
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps": {
            "type": "object",
            "properties": {
                "items": {
                    "$ref": "#/definitions/io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps"
                }
            },
            "x-kubernetes-group-version-kind": [
                {"group": "apiextensions.k8s.io", "kind": "JSONSchemaProps", "version": "v1"}
            ],
        },
        "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent": {
            "type": "object",
            "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "WatchEvent", "version": "v1"}],
        },
    }
}

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "spec": {
        "group": "enclave.dev",
        "names": {"kind": "Tenant"},
        "versions": [
            {
                "name": "v1beta2",
                "served": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["owners", "mode"],
                                "properties": {
                                    "owners": {"type": "array", "items": {"type": "string"}},
                                    "quota": {"x-kubernetes-int-or-string": True},
                                    "note": {"type": "string", "nullable": True},
                                    "mode": {"type": "string", "default": "Open"},
                                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                },
                            }
                        },
                    }
                },
            },
            {"name": "v1alpha1", "served": False, "schema": {"openAPIV3Schema": {"type": "object"}}},
        ],
    },
}


def test_file_names_are_kubeconforms() -> None:
    assert schemas.file_name("apps/v1", "Deployment") == "deployment-apps-v1.json"
    assert schemas.file_name("v1", "ConfigMap") == "configmap-v1.json"
    assert schemas.file_name("admissionregistration.k8s.io/v1", "X") == "x-admissionregistration-v1.json"
    assert schemas.file_name("enclave.dev/v1beta2", "Tenant") == "tenant-enclave-v1beta2.json"
    assert schemas.layout_dir(Path("/s"), "1.35.4") == Path("/s/v1.35.4-standalone-strict")


def test_every_kind_is_a_standalone_strict_schema() -> None:
    made = schemas.from_openapi_v2(OPENAPI)
    assert set(made) == {"deployment-apps-v1.json", "configmap-v1.json", "jsonschemaprops-apiextensions-v1.json"}
    deployment = made["deployment-apps-v1.json"]
    # Everything the kind reaches is in the file, referenced inside it; nothing it does not reach.
    assert set(deployment["definitions"]) == {
        "io.k8s.api.apps.v1.DeploymentSpec",
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "io.k8s.apimachinery.pkg.api.resource.Quantity",
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    }
    assert "description" not in json.dumps(deployment)
    assert deployment["additionalProperties"] is False
    spec = deployment["definitions"]["io.k8s.api.apps.v1.DeploymentSpec"]
    assert spec["additionalProperties"] is False
    assert spec["properties"]["selector"] == {"type": "object"}  # required: never null
    assert spec["properties"]["replicas"] == {"type": ["integer", "null"], "format": "int32"}  # optional: may be
    assert spec["properties"]["resources"]["additionalProperties"] == {
        "$ref": "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity"
    }
    # What the apiserver accepts beyond the declared JSON type: cpu: 1, maxSurge: 1 or "25%".
    definitions = deployment["definitions"]
    assert {"type": "number"} in definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"]["anyOf"]
    assert {"type": "integer"} in definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["anyOf"]
    # A map without listed properties takes any key.
    labels = definitions["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["labels"]
    assert labels == {"type": ["object", "null"]}


def test_recursive_definitions_stay_finite() -> None:
    props = schemas.from_openapi_v2(OPENAPI)["jsonschemaprops-apiextensions-v1.json"]
    assert "definitions" not in props  # the only reference is to itself
    assert json.dumps(props)  # no cycle


def test_non_strict_leaves_objects_open() -> None:
    made = schemas.from_openapi_v2(OPENAPI, strict=False)
    assert "additionalProperties" not in made["deployment-apps-v1.json"]


def test_crd_versions_become_schemas_with_kubernetes_extensions_honoured() -> None:
    made = schemas.from_crds([CRD, {"kind": "ConfigMap"}])
    assert set(made) == {"tenant-enclave-v1beta2.json"}  # v1alpha1 is not served
    tenant = made["tenant-enclave-v1beta2.json"]
    spec = tenant["properties"]["spec"]
    assert spec["additionalProperties"] is False
    assert spec["required"] == ["owners"]  # mode has a default, which the apiserver fills in first
    assert spec["properties"]["owners"] == {"type": "array", "items": {"type": "string"}}
    assert spec["properties"]["quota"] == {
        "anyOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"type": "null"}]
    }
    assert spec["properties"]["note"] == {"type": ["string", "null"]}
    assert "additionalProperties" not in spec["properties"]["extra"]  # x-kubernetes-preserve-unknown-fields


def test_write_and_load(tmp_path: Path) -> None:
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "tenant.yaml").write_text(json.dumps(CRD))
    loaded = schemas.load_crds(tmp_path / "crds")
    target = schemas.write(schemas.from_crds(loaded), tmp_path / "out")
    assert json.loads((target / "tenant-enclave-v1beta2.json").read_text())["type"] == "object"
