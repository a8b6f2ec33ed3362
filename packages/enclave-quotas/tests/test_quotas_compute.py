"""Counting without a cluster: source resolution, selection, usage, bad input and the hook's rules."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from enclave_quotas.compute import count
from enclave_quotas.discovery import ApiResource, Catalogue
from enclave_quotas.webhook import rules

from enclave_core.api.quotas import Source

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PODS = ApiResource("", "v1", "Pod", "pods", True)
CONFIGMAPS = ApiResource("", "v1", "ConfigMap", "configmaps", True)
DEPLOY_V1 = ApiResource("apps", "v1", "Deployment", "deployments", True)
WIDGETS_V1 = ApiResource("example.dev", "v1", "Widget", "widgets", True)
WIDGETS_V2 = ApiResource("example.dev", "v2", "Widget", "widgets", True)
NODES = ApiResource("", "v1", "Node", "nodes", False)
CATALOGUE = Catalogue(
    (PODS, CONFIGMAPS, NODES, DEPLOY_V1, WIDGETS_V1, WIDGETS_V2),
    (("", "v1"), ("apps", "v1"), ("example.dev", "v2")),
)


def quota(kind: str = "CustomQuota", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "q", "uid": "uid-q", "generation": 1}
    if kind == "CustomQuota":
        meta["namespace"] = "team"
    return {"metadata": meta, "spec": spec}


def obj(name: str, namespace: str = "team", labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels or {}},
        "data": data,
    }


def test_api_version_forms_resolve_through_discovery() -> None:
    def kinds(**source: Any) -> list[tuple[str, str, str]]:
        return [(r.group, r.version, r.kind) for r in CATALOGUE.resolve(Source.model_validate(source))]

    assert kinds(kind="Pod") == [("", "v1", "Pod")]
    assert kinds(kind="Widget", apiVersion="example.dev") == [("example.dev", "v2", "Widget")]
    assert kinds(kind="Widget", apiVersion="example.dev/*") == [("example.dev", "v2", "Widget")]
    assert kinds(kind="Widget", apiVersion="example.dev/v1") == [("example.dev", "v1", "Widget")]
    assert kinds(kind="*", apiVersion="apps") == [("apps", "v1", "Deployment")]
    assert ("example.dev", "v2", "Widget") in kinds(kind="*", apiVersion="*")
    assert kinds(kind="Gadget", apiVersion="example.dev") == []


def test_count_path_selection_and_the_entry() -> None:
    raw = quota(
        limit="10", sources=[{"kind": "ConfigMap", "path": ".data.n", "selectors": [{"matchLabels": {"c": "y"}}]}]
    )
    objects = [
        obj("a", labels={"c": "y"}, n="2"),
        obj("b", labels={"c": "n"}, n="5"),
        obj("c", "other", {"c": "y"}, n="7"),
    ]
    view = count("CustomQuota", raw, CATALOGUE, lambda r: objects if r == CONFIGMAPS else [], {}, now=NOW)
    assert str(view.used) == "2"
    assert view.entry is not None
    assert view.entry.ledger == "customquota.team.q"
    assert view.status is not None
    assert view.status["usage"] == {"used": "2", "available": "8"}
    assert [c["name"] for c in view.status["claims"]] == ["a"]
    assert view.status["conditions"][0]["reason"] == "Counted"


def test_global_quota_selects_namespaces_and_bad_input_is_reported() -> None:
    raw = quota(
        "GlobalCustomQuota",
        limit=5,
        namespaceSelectors=[{"matchLabels": {"t": "x"}}],
        sources=[
            {"kind": "ConfigMap", "path": ".data.n"},
            {"kind": "Gadget", "apiVersion": "example.dev", "op": "count"},
        ],
    )
    raw["status"] = {
        "claims": [
            {
                "group": "",
                "kind": "ConfigMap",
                "name": "bad",
                "uid": "uid-bad",
                "version": "v1",
                "usage": "3",
                "namespace": "a",
            }
        ]
    }
    namespaces = {"a": {"t": "x"}, "b": {}}
    objects = [obj("ok", "a", n="1"), obj("bad", "a", n="many"), obj("none", "a"), obj("elsewhere", "b", n="9")]
    view = count("GlobalCustomQuota", raw, CATALOGUE, lambda r: objects, namespaces, now=NOW)
    assert str(view.used) == "4"  # ok (1) + bad's last good count (3); none is reported and not counted
    assert view.status is not None
    assert view.status["namespaces"] == ["a"]
    reasons = [reason for reason, _ in view.problems]
    assert reasons.count("UsageUnreadable") == 2
    assert "SourceNotFound" in reasons
    assert view.status["conditions"][0]["status"] == "False"


def test_an_invalid_spec_keeps_the_last_status() -> None:
    raw = quota(limit=1, sources=[{"kind": "Pod", "op": "count", "path": ".x"}])
    raw["status"] = {"usage": {"used": "1"}, "targets": []}
    view = count("CustomQuota", raw, CATALOGUE, lambda r: [], {}, now=NOW)
    assert view.entry is None
    assert view.status is not None
    assert view.status["usage"] == {"used": "1"}
    assert view.status["conditions"][0]["reason"] == "InvalidSpec"
    assert "spec.sources[0].path" in view.status["conditions"][0]["message"]


def test_hook_rules_group_resources_by_group_and_scope() -> None:
    raw = quota(
        limit=1,
        sources=[
            {"kind": "Pod", "op": "count"},
            {"kind": "ConfigMap", "op": "count"},
            {"kind": "Deployment", "apiVersion": "apps", "op": "count"},
        ],
    )
    view = count("CustomQuota", raw, CATALOGUE, lambda r: [], {}, now=NOW)
    assert view.entry is not None
    assert rules([view.entry]) == [
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["configmaps", "pods"],
            "scope": "Namespaced",
        },
        {
            "apiGroups": ["apps"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["deployments"],
            "scope": "Namespaced",
        },
    ]
