"""The CRD generator: committed CRDs match the models, and every schema is structural and affordable.

kube-apiserver refuses a CRD whose schema is not structural or whose CEL rules may cost too much;
these checks catch both without a cluster (the integration tests install the real thing).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from enclave_core.api import KINDS, KindInfo
from enclave_core.api.crdgen import HEADER, QUANTITY_PATTERN, check, crd_for, generate, main, write

REPO = Path(__file__).resolve().parents[4]
CRD_DIR = REPO / "charts" / "enclave" / "crds"
FREE_FORM = {".spec.data", ".spec.resources[].rawItems[]", ".spec[].data"}
"""The only places where unknown fields are kept (everything else is pruned)."""


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for key, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def _schema(info: KindInfo, version: int = -1) -> dict[str, Any]:
    """The openAPIV3Schema of one version (default v1beta2, the last; 0 is v1beta1)."""
    schema: dict[str, Any] = crd_for(info)["spec"]["versions"][version]["schema"]["openAPIV3Schema"]
    return schema


BY_KIND = pytest.mark.parametrize("info", KINDS, ids=lambda info: info.kind)


def test_committed_crds_match_the_models() -> None:
    problems = check(CRD_DIR)
    assert not problems, (
        "CRDs are stale; run: python -m enclave_core.api.crdgen --write charts/enclave/crds\n" + "\n".join(problems)
    )


def test_check_reports_drift_and_write_fixes_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--write", str(tmp_path)]) == 0
    assert main(["--check", str(tmp_path)]) == 0
    target = tmp_path / "tenants.enclave.dev.yaml"
    target.write_text(target.read_text() + "# edited\n")
    (tmp_path / "gone.enclave.dev.yaml").write_text(HEADER + "{}\n")
    assert main(["--check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "tenants.enclave.dev.yaml: differs" in err
    assert "gone.enclave.dev.yaml" in err
    write(tmp_path)
    assert check(tmp_path) == []
    assert not (tmp_path / "gone.enclave.dev.yaml").exists()


generated = functools.cache(generate)
"""The CRDs rendered once for the tests that only read them: rendering every kind takes seconds, and the
per-kind tests each rendered all of them again."""


def test_generation_is_deterministic() -> None:
    assert generate() == generate()
    assert sorted(generate()) == sorted(f"{info.plural}.enclave.dev.yaml" for info in KINDS)


@BY_KIND
def test_crd_names_scope_and_subresources(info: KindInfo) -> None:
    crd = yaml.safe_load(generated()[f"{info.crd_name}.yaml"])
    spec = crd["spec"]
    assert crd["metadata"]["name"] == info.crd_name
    assert spec["scope"] == info.scope
    assert spec["names"]["categories"] == ["enclave"]
    assert spec["names"]["shortNames"] == list(info.short_names)
    older, version = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1beta2", True, True)
    assert (older["name"], older["served"], older["storage"], older["deprecated"]) == ("v1beta1", True, False, True)
    assert "use enclave.dev/v1beta2" in older["deprecationWarning"]
    assert spec["conversion"]["strategy"] == "Webhook"
    assert spec["conversion"]["webhook"]["clientConfig"]["service"]["path"] == "/convert"
    for each in (older, version):
        assert each["subresources"] == {"status": {}}
        columns = [column["name"] for column in each["additionalPrinterColumns"]]
        assert columns[-1] == "Age"
        assert "Ready" in columns or info.kind == "QuantityLedger"


def test_v1beta1_schemas_are_the_older_shapes() -> None:
    tenant = yaml.safe_load(generated()["tenants.enclave.dev.yaml"])["spec"]["versions"][0]
    spec = tenant["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert "namespaceQuota" in spec
    assert "namespaceOptions" not in spec
    assert "rules" not in spec
    quota = next(c for c in tenant["additionalPrinterColumns"] if c["name"] == "Quota")
    assert quota["jsonPath"] == ".spec.namespaceQuota"
    configuration = yaml.safe_load(generated()["serviceconfigurations.enclave.dev.yaml"])["spec"]["versions"][0]
    schema = configuration["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "users" not in schema["properties"]
    assert "admission" not in schema["properties"]
    assert any("at most 256 entries together" in rule["message"] for rule in schema["x-kubernetes-validations"])


@BY_KIND
def test_schema_is_structural(info: KindInfo) -> None:
    text = generated()[f"{info.crd_name}.yaml"]
    assert "$ref" not in text
    for path, node in [*_walk(_schema(info)), *_walk(_schema(info, 0))]:
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
        assert "type" in node or int_or_string or preserve, f"{path}: no type"
        if "anyOf" in node:
            assert int_or_string, f"{path}: anyOf outside int-or-string"
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}]
        if preserve:
            assert path in FREE_FORM, f"{path}: unexpected x-kubernetes-preserve-unknown-fields"
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), f"{path}: array without items"
        for keyword in ("oneOf", "allOf", "not", "$ref", "definitions", "$defs"):
            assert keyword not in node, f"{path}: {keyword}"
        for key in ("minimum", "maximum"):
            if key in node:
                assert abs(node[key]) < 2**53, f"{path}: {key} is not exact as float64"


@BY_KIND
def test_every_rule_has_a_message_and_a_bounded_context(info: KindInfo) -> None:
    """A rule under an unbounded list or map makes kube-apiserver estimate an unbounded cost."""
    schema = _schema(info)
    for path, node in _walk(schema):
        for rule in node.get("x-kubernetes-validations", []):
            assert rule["message"], f"{path}: rule without a message"
            assert "\n" not in rule["message"], f"{path}: message on several lines"
            assert not path.startswith(".status"), f"{path}: CEL rules are not generated under status"
            _assert_bounded_ancestors(schema, path)


def _assert_bounded_ancestors(schema: dict[str, Any], path: str) -> None:
    node, walked = schema, ""
    for token in _tokens(path):
        if token == "[]":
            assert "maxItems" in node, f"{walked}: list above a CEL rule needs maxItems"
            node = node["items"]
        elif token == "{}":
            assert "maxProperties" in node, f"{walked}: map above a CEL rule needs maxProperties"
            node = node["additionalProperties"]
        else:
            node = node["properties"][token]
        walked += token if token in ("[]", "{}") else f".{token}"


def _tokens(path: str) -> list[str]:
    tokens: list[str] = []
    for part in path.split("."):
        if not part:
            continue
        name = part.split("[]")[0].split("{}")[0]
        if name:
            tokens.append(name)
        rest = part[len(name) :]
        while rest:
            tokens.append(rest[:2])
            rest = rest[2:]
    return tokens


def test_quantities_are_int_or_string_with_the_quantity_pattern() -> None:
    spec = _schema(next(info for info in KINDS if info.kind == "CustomQuota"))["properties"]["spec"]
    limit = spec["properties"]["limit"]
    assert limit["x-kubernetes-int-or-string"] is True
    assert limit["pattern"] == QUANTITY_PATTERN


def test_defaults_enums_and_ranges_reach_the_schema() -> None:
    config = _schema(next(info for info in KINDS if info.kind == "ServiceConfiguration"))["properties"]["spec"]
    webhook = config["properties"]["admission"]["properties"]["mutating"]["properties"]["webhooks"]["items"]
    timeout = webhook["properties"]["timeoutSeconds"]
    assert (timeout["default"], timeout["minimum"], timeout["maximum"]) == (10, 1, 30)
    assert webhook["properties"]["failurePolicy"] == {
        "type": "string",
        "enum": ["Ignore", "Fail"],
        "default": "Fail",
        "description": "What an unreachable or failing endpoint means: Ignore or Fail.",
    }
    assert webhook["properties"]["matchConditions"]["maxItems"] == 64
    assert config["properties"]["cacheInvalidation"]["default"] == "24h"
    assert set(config["required"]) == {"cacheInvalidation", "enableTLSReconciler", "rbac"}
    assert config["properties"]["rbac"]["default"]["deleter"] == "enclave-namespace-deleter"


def test_tenant_name_rule_is_at_the_root() -> None:
    tenant = _schema(next(info for info in KINDS if info.kind == "Tenant"))
    (rule,) = tenant["x-kubernetes-validations"]
    assert "self.metadata.name" in rule["rule"]
    assert "DNS-1123 label" in rule["message"]


def test_files_start_with_the_generated_header() -> None:
    for text in generated().values():
        assert text.startswith(HEADER)
        assert yaml.safe_load(text)["kind"] == "CustomResourceDefinition"


def test_docs_reference_matches_the_models() -> None:
    spec = importlib.util.spec_from_file_location("docgen", REPO / "hack" / "docgen.py")
    assert spec is not None
    assert spec.loader is not None
    docgen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docgen)
    splice = docgen.splice

    docs = REPO / "docs" / "api.md"
    text = docs.read_text(encoding="utf-8")
    assert splice(text) == text, "docs/api.md is stale; run: python hack/docgen.py --write docs/api.md"
