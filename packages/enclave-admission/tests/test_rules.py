"""The rule engine's decisions (``/resources``, ``/resources/mutate``) on hand-built Rules snapshots."""

from __future__ import annotations

from typing import Any

import pytest
from admission_helpers import ALICE, apply_patch, make_state, request, tenant, user

from enclave_admission.review import Decision
from enclave_admission.rules import matching
from enclave_admission.rules.mutation import mutate
from enclave_admission.rules.validation import validate
from enclave_admission.state import State
from enclave_core.api.names import TENANT_LABEL
from enclave_core.api.rules import AppliedRule
from enclave_core.snapshots.rules import BudgetView, NamespaceRules, RulesSnapshot, VolumeView

JSON = dict[str, Any]
NS = "solar-dev"
CONTROLLER = ("system:serviceaccount:kube-system:replicaset-controller", ("system:serviceaccounts",))


def rule(index: int = 0, **body: Any) -> AppliedRule:
    return AppliedRule.model_validate({**body, "origin": {"kind": "Tenant", "name": "solar", "index": index}})


def state_with(
    *rules: AppliedRule, volumes: list[VolumeView] | None = None, budgets: list[BudgetView] | None = None
) -> State:
    state = make_state([tenant("solar", "alice", namespaces=[NS]), tenant("oil", "bob", namespaces=["oil-dev"])])
    state.set_rules(
        RulesSnapshot(
            namespaces=[NamespaceRules(namespace=NS, tenant="solar", rules=list(rules))],
            volumes=volumes or [],
            budgets=budgets or [],
        )
    )
    return state


def obj(kind: str, name: str = "x", api_version: str = "v1", labels: dict[str, str] | None = None, **top: Any) -> JSON:
    meta: JSON = {"name": name, "namespace": NS}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **top}


def check(state: State, who: Any, operation: str, new: JSON | None, old: JSON | None = None, **kw: Any) -> Decision:
    kw.setdefault("namespace", NS)
    return validate(request(who, operation, new, old, **kw), state)


def configmap(labels: dict[str, str] | None = None) -> JSON:
    return obj("ConfigMap", labels=labels)


CM: JSON = {"resource": "configmaps", "kind": "ConfigMap"}


# -- metadata ------------------------------------------------------------------------------------------------


def test_deny_label_value_names_rule_field_and_value() -> None:
    state = state_with(
        rule(
            enforce={
                "action": "deny",
                "metadata": [{"kinds": ["*"], "labels": {"env": {"values": [{"exact": ["prod"]}]}}}],
            }
        )
    )
    denied = check(state, ALICE, "CREATE", configmap({"env": "prod"}), **CM)
    assert not denied.allowed
    assert "Tenant solar spec.rules[0]" in denied.message
    assert "metadata.labels['env']='prod'" in denied.message
    assert check(state, ALICE, "CREATE", configmap({"env": "dev"}), **CM).allowed


def test_controllers_are_judged_like_users_and_the_control_plane_object_is_not() -> None:
    state = state_with(
        rule(enforce={"action": "allow", "metadata": [{"kinds": ["*"], "labels": {"team": {"required": True}}}]})
    )
    pod = obj("Pod")
    assert not check(state, CONTROLLER, "CREATE", pod, resource="pods", kind="Pod").allowed
    root = obj("ConfigMap", name="kube-root-ca.crt")
    root_publisher = ("system:serviceaccount:kube-system:root-ca-cert-publisher", ("system:serviceaccounts",))
    assert check(state, root_publisher, "CREATE", root, **CM).allowed
    assert check(state, ("system:kube-scheduler", ()), "CREATE", pod, resource="pods", kind="Pod").allowed


def test_last_matching_allow_or_deny_decides() -> None:
    deny_all = {"action": "deny", "metadata": [{"kinds": ["ConfigMap"], "labels": {"tier": {}}}]}
    allow_web = {
        "action": "allow",
        "metadata": [{"kinds": ["ConfigMap"], "labels": {"tier": {"values": [{"exact": ["web"]}]}}}],
    }
    state = state_with(rule(0, enforce=deny_all), rule(1, enforce=allow_web))
    assert check(state, ALICE, "CREATE", configmap({"tier": "web"}), **CM).allowed
    refused = check(state, ALICE, "CREATE", configmap({"tier": "db"}), **CM)
    assert not refused.allowed
    assert "spec.rules[1]" in refused.message


def test_update_judges_only_changed_keys() -> None:
    state = state_with(rule(enforce={"action": "deny", "metadata": [{"kinds": ["*"], "labels": {"legacy": {}}}]}))
    old = configmap({"legacy": "yes"})
    new = configmap({"legacy": "yes", "other": "1"})
    assert check(state, ALICE, "UPDATE", new, old, **CM).allowed
    assert not check(state, ALICE, "UPDATE", configmap({"legacy": "no"}), old, **CM).allowed


def test_conditions_skip_match_and_error() -> None:
    deny = {"action": "deny", "metadata": [{"kinds": ["*"], "labels": {"env": {}}}]}

    def with_conditions(*expressions: str) -> State:
        return state_with(rule(enforce={**deny, "conditions": [{"expression": e} for e in expressions]}))

    cm = configmap({"env": "x"})
    assert check(with_conditions("request.userInfo.username == 'bob'"), ALICE, "CREATE", cm, **CM).allowed
    assert not check(with_conditions("request.userInfo.username == 'alice'"), ALICE, "CREATE", cm, **CM).allowed
    errored = check(with_conditions("object.spec.missing == 1"), ALICE, "CREATE", cm, **CM)
    assert not errored.allowed
    assert "could not be evaluated" in errored.message
    assert check(with_conditions("object.spec.missing == 1", "false"), ALICE, "CREATE", cm, **CM).allowed


def test_audience_includes_and_excludes_and_custom() -> None:
    deny = {"action": "deny", "metadata": [{"kinds": ["*"], "labels": {"env": {}}}]}
    cm = configmap({"env": "x"})
    group_rule = state_with(rule(audience=[{"kind": "Group", "name": "enclave.dev"}], enforce=deny))
    assert not check(group_rule, ALICE, "CREATE", cm, **CM).allowed
    assert check(group_rule, user("carol", "other"), "CREATE", cm, **CM).allowed
    custom = state_with(
        rule(audience=[{"kind": "Custom", "name": "request.userInfo.username.startsWith('al')"}], enforce=deny)
    )
    assert not check(custom, ALICE, "CREATE", cm, **CM).allowed
    assert check(custom, user("bob", "enclave.dev"), "CREATE", cm, **CM).allowed


def test_audit_allows_and_reports() -> None:
    state = state_with(rule(enforce={"action": "audit", "metadata": [{"kinds": ["*"], "labels": {"env": {}}}]}))
    decision = check(state, ALICE, "CREATE", configmap({"env": "x"}), **CM)
    assert decision.allowed
    assert decision.audits
    assert "audits metadata.labels['env']" in decision.audits[0]


def test_forged_enclave_labels_do_not_skip_a_deny() -> None:
    state = state_with(rule(enforce={"action": "deny", "metadata": [{"kinds": ["*"], "labels": {"env": {}}}]}))
    forged = configmap({"env": "x", TENANT_LABEL: "solar", "enclave.dev/managed-by": "enclave-replication"})
    assert not check(state, ALICE, "CREATE", forged, **CM).allowed


def test_managed_and_default_mutation_then_validation() -> None:
    labels = {"cost-center": {"managed": "42"}, "owner": {"default": "team-a"}}
    state = state_with(rule(enforce={"action": "allow", "metadata": [{"kinds": ["ConfigMap"], "labels": labels}]}))
    created = configmap()
    patched = mutate(request(ALICE, "CREATE", created, namespace=NS, **CM), state)
    result = apply_patch(created, patched)
    assert result["metadata"]["labels"] == {"cost-center": "42", "owner": "team-a"}
    assert mutate(request(ALICE, "CREATE", result, namespace=NS, **CM), state).patch == ()  # idempotent
    assert check(state, ALICE, "CREATE", result, **CM).allowed
    assert not check(state, ALICE, "UPDATE", configmap({"cost-center": "7"}), result, **CM).allowed


def test_mutate_entries_apply_in_order() -> None:
    state = state_with(
        rule(
            mutate=[
                {"metadata": {"kinds": ["*"], "labels": {"a": "1"}}},
                {"metadata": {"kinds": ["*"], "labels": {"a": "2"}, "overwrite": True}},
                {"metadata": {"kinds": ["*"], "annotations": {"b": "3"}}},
            ]
        )
    )
    result = apply_patch(configmap(), mutate(request(ALICE, "CREATE", configmap(), namespace=NS, **CM), state))
    assert result["metadata"]["labels"] == {"a": "2"}
    assert result["metadata"]["annotations"] == {"b": "3"}


# -- services ------------------------------------------------------------------------------------------------

SVC: JSON = {"resource": "services", "kind": "Service"}


def service(**spec: Any) -> JSON:
    return obj("Service", spec=spec)


def test_services_external_ips_and_types() -> None:
    deny_all = rule(0, enforce={"action": "deny", "services": {"externalIPs": {"cidrs": []}}})
    allow_ten = rule(1, enforce={"action": "allow", "services": {"externalIPs": {"cidrs": ["10.0.0.0/8"]}}})
    state = state_with(deny_all, allow_ten)
    assert check(state, ALICE, "CREATE", service(externalIPs=["10.1.2.3"]), **SVC).allowed
    refused = check(state, ALICE, "CREATE", service(externalIPs=["10.1.2.3", "1.2.3.4"]), **SVC)
    assert not refused.allowed
    assert "spec.externalIPs[1]" in refused.message
    no_lb = state_with(rule(enforce={"action": "deny", "services": {"types": ["LoadBalancer"]}}))
    assert not check(no_lb, ALICE, "CREATE", service(type="LoadBalancer"), **SVC).allowed
    assert check(no_lb, ALICE, "CREATE", service(), **SVC).allowed


def test_services_node_ports_names_and_balancers() -> None:
    state = state_with(
        rule(
            enforce={
                "action": "allow",
                "services": {
                    "nodePorts": {"ports": [{"from": 30000, "to": 30100}]},
                    "externalNames": {"hostnames": [{"exp": r".*\.example\.com"}]},
                    "loadBalancers": {"cidrs": ["192.0.2.0/24"]},
                },
            }
        )
    )
    assert check(
        state, ALICE, "CREATE", service(type="NodePort", ports=[{"port": 80, "nodePort": 30050}]), **SVC
    ).allowed
    assert not check(
        state, ALICE, "CREATE", service(type="NodePort", ports=[{"port": 80, "nodePort": 31000}]), **SVC
    ).allowed
    assert check(state, ALICE, "CREATE", service(type="ExternalName", externalName="db.example.com"), **SVC).allowed
    assert not check(state, ALICE, "CREATE", service(type="ExternalName", externalName="evil.org"), **SVC).allowed
    assert not check(state, ALICE, "CREATE", service(loadBalancerSourceRanges=["0.0.0.0/0"]), **SVC).allowed
    assert check(state, ALICE, "CREATE", service(loadBalancerSourceRanges=["192.0.2.128/25"]), **SVC).allowed


# -- network -------------------------------------------------------------------------------------------------

NP: JSON = {"resource": "networkpolicies", "kind": "NetworkPolicy", "group": "networking.k8s.io"}


def policy(**spec: Any) -> JSON:
    return obj("NetworkPolicy", api_version="networking.k8s.io/v1", spec={"podSelector": {}, **spec})


def test_network_allow_requires_coverage_and_peerless_grants_everything() -> None:
    state = state_with(
        rule(enforce={"action": "allow", "network": {"policies": {"egress": {"cidrs": ["10.0.0.0/8"]}}}})
    )
    inside = {"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}]}
    outside = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["192.168.0.0/16"]}}]}
    assert check(state, ALICE, "CREATE", policy(egress=[inside]), **NP).allowed
    assert not check(state, ALICE, "CREATE", policy(egress=[outside]), **NP).allowed
    assert not check(state, ALICE, "CREATE", policy(egress=[{}]), **NP).allowed  # peer-less: all of v4 and v6
    selector_only: JSON = {"to": [{"podSelector": {}}]}
    assert check(state, ALICE, "CREATE", policy(egress=[selector_only]), **NP).allowed
    assert check(state, ALICE, "CREATE", policy(ingress=[{}]), **NP).allowed  # ingress has no constraint


def test_network_deny_overlap_with_excepts_and_ipv6() -> None:
    state = state_with(
        rule(
            enforce={"action": "deny", "network": {"policies": {"ingress": {"cidrs": ["169.254.0.0/16", "fd00::/8"]}}}}
        )
    )
    carved = {"from": [{"ipBlock": {"cidr": "169.0.0.0/8", "except": ["169.254.0.0/16"]}}]}
    assert check(state, ALICE, "CREATE", policy(ingress=[carved]), **NP).allowed
    v6 = {"from": [{"ipBlock": {"cidr": "fd12::/16"}}]}
    refused = check(state, ALICE, "CREATE", policy(ingress=[v6]), **NP)
    assert not refused.allowed
    assert "spec.ingress[0].from[0].ipBlock" in refused.message


def test_interval_arithmetic() -> None:
    rule_space = matching.ranges(["10.0.0.0/9", "10.128.0.0/9"])
    assert matching.covered(matching.grant("10.0.0.0/8") or matching.EVERYTHING, rule_space)
    holes = matching.grant(
        "0.0.0.0/0",
        ["0.0.0.0/5", "8.0.0.0/7", "11.0.0.0/8", "12.0.0.0/6", "16.0.0.0/4", "32.0.0.0/3", "64.0.0.0/2", "128.0.0.0/1"],
    )
    assert holes is not None
    assert matching.covered(holes, rule_space)


# -- ingress -------------------------------------------------------------------------------------------------


def test_ingress_hostnames_and_missing_hosts() -> None:
    state = state_with(rule(enforce={"action": "allow", "ingress": {"hostnames": [{"exp": r".*\.solar\.example"}]}}))
    ing: JSON = {"resource": "ingresses", "kind": "Ingress", "group": "networking.k8s.io"}

    def ingress(*hosts: str, tls: list[str] | None = None) -> JSON:
        spec: JSON = {"rules": [{"host": h} if h else {} for h in hosts]}
        if tls is not None:
            spec["tls"] = [{"hosts": tls}]
        return obj("Ingress", api_version="networking.k8s.io/v1", spec=spec)

    assert check(state, ALICE, "CREATE", ingress("a.solar.example", tls=["a.solar.example"]), **ing).allowed
    assert not check(state, ALICE, "CREATE", ingress("a.oil.example"), **ing).allowed
    missing = check(state, ALICE, "CREATE", ingress(""), **ing)
    assert not missing.allowed
    assert "spec.rules[0].host has none" in missing.message
    assert not check(state, ALICE, "CREATE", ingress("a.solar.example", tls=["x.org"]), **ing).allowed
    route: JSON = {"resource": "httproutes", "kind": "HTTPRoute", "group": "gateway.networking.k8s.io"}
    http = obj("HTTPRoute", api_version="gateway.networking.k8s.io/v1", spec={"hostnames": ["b.solar.example"]})
    assert check(state, ALICE, "CREATE", http, **route).allowed
    assert not check(
        state, ALICE, "CREATE", obj("HTTPRoute", api_version="gateway.networking.k8s.io/v1", spec={}), **route
    ).allowed


# -- storage -------------------------------------------------------------------------------------------------

PVC: JSON = {"resource": "persistentvolumeclaims", "kind": "PersistentVolumeClaim"}


def claim(volume: str) -> JSON:
    return obj("PersistentVolumeClaim", spec={"volumeName": volume})


def test_storage_fence_and_allow_entries() -> None:
    volumes = [
        VolumeView(name="theirs", labels={TENANT_LABEL: "oil"}),
        VolumeView(name="ours", labels={TENANT_LABEL: "solar"}),
        VolumeView(name="shared", labels={"pool": "shared"}),
        VolumeView(name="loose", labels={}),
    ]
    allow_shared = rule(
        enforce={"action": "allow", "storage": {"volumes": [{"selector": {"matchLabels": {"pool": "shared"}}}]}}
    )
    state = state_with(allow_shared, volumes=volumes)
    theirs = check(state, ALICE, "CREATE", claim("theirs"), **PVC)
    assert not theirs.allowed
    assert "belongs to another tenant" in theirs.message
    assert "oil" not in theirs.message  # tenants do not learn each other's names
    assert check(state, ALICE, "CREATE", claim("ours"), **PVC).allowed
    assert check(state, ALICE, "CREATE", claim("shared"), **PVC).allowed
    assert not check(state, ALICE, "CREATE", claim("loose"), **PVC).allowed


def test_volume_tenant_label_is_not_for_tenant_users() -> None:
    state = state_with()
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv", "labels": {TENANT_LABEL: "solar"}},
    }
    pv: JSON = {"resource": "persistentvolumes", "kind": "PersistentVolume", "namespace": ""}
    assert not validate(request(ALICE, "CREATE", volume, **pv), state).allowed
    assert validate(request(("root-admin", ("enclave-admins",)), "CREATE", volume, **pv), state).allowed


@pytest.mark.parametrize("operation", ["DELETE"])
def test_deletes_are_not_judged(operation: str) -> None:
    state = state_with(rule(enforce={"action": "deny", "metadata": [{"kinds": ["*"], "labels": {"env": {}}}]}))
    assert check(state, ALICE, operation, None, configmap({"env": "x"}), **CM).allowed


# -- bad input at the API ----------------------------------------------------------------------------------------


def test_tenant_with_rules_that_cannot_work_is_refused_naming_the_field() -> None:
    from enclave_admission.tenants.validation import validate as validate_tenant

    state = state_with()
    body = {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "Tenant",
        "metadata": {"name": "solar"},
        "spec": {
            "rules": [
                {
                    "enforce": {
                        "conditions": [{"expression": "object.metadata.name =="}],
                        "metadata": [{"kinds": ["configmap"], "labels": {"a": {"values": [{"exp": "("}]}}}],
                        "network": {"policies": {"egress": {"cidrs": ["10.0.0.0/33"]}}},
                    }
                }
            ]
        },
    }
    tenants = {"resource": "tenants", "kind": "Tenant", "group": "enclave.dev"}
    refused = validate_tenant(request(("root-admin", ("enclave-admins",)), "CREATE", body, **tenants), state)
    assert not refused.allowed
    for field in (
        "spec.rules[0].enforce.conditions[0].expression",
        "spec.rules[0].enforce.metadata[0].kinds[0]",
        "spec.rules[0].enforce.metadata[0].labels['a'].values[0].exp",
        "spec.rules[0].enforce.network.policies.egress.cidrs[0]",
    ):
        assert field in refused.message
    rule_status = {"apiVersion": "enclave.dev/v1beta2", "kind": "RuleStatus", "metadata": {"name": "default"}}
    own = {"resource": "rulestatuses", "kind": "RuleStatus", "group": "enclave.dev", "namespace": NS}
    assert not validate_tenant(request(ALICE, "CREATE", rule_status, **own), state).allowed


def test_rules_hook_judges_system_masters_and_lets_unchanged_rules_through() -> None:
    """``/rules`` is the validity check for writers the tenants hook skips (system:masters): a broken rule is
    refused naming the field, and an update that leaves the rules as they were passes (a stored broken rule
    never blocks edits of anything else)."""
    from enclave_admission.tenants.validation import validate_rules

    state = state_with()
    masters = ("kubernetes-admin", ("system:masters",))
    tenants = {"resource": "tenants", "kind": "Tenant", "group": "enclave.dev"}

    def tenant_with(exp: str, **spec: Any) -> dict[str, Any]:
        rules = [{"enforce": {"action": "deny", "ingress": {"hostnames": [{"exp": exp}]}}}]
        return {
            "apiVersion": "enclave.dev/v1beta2",
            "kind": "Tenant",
            "metadata": {"name": "t"},
            "spec": {"rules": rules, **spec},
        }

    refused = validate_rules(request(masters, "CREATE", tenant_with("("), **tenants), state)
    assert not refused.allowed
    assert "spec.rules[0].enforce.ingress.hostnames[0].exp" in refused.message
    assert validate_rules(request(masters, "CREATE", tenant_with("[a-z]+"), **tenants), state).allowed
    unchanged = request(masters, "UPDATE", tenant_with("(", preventDeletion=True), tenant_with("("), **tenants)
    assert validate_rules(unchanged, state).allowed
    rule_status = {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "RuleStatus",
        "metadata": {"name": "default", "namespace": NS},
        "spec": [{"enforce": {"conditions": [{"expression": "object.("}]}}],
    }
    own = {"resource": "rulestatuses", "kind": "RuleStatus", "group": "enclave.dev", "namespace": NS}
    refused = validate_rules(request(masters, "CREATE", rule_status, **own), state)
    assert "spec[0].enforce.conditions[0].expression" in refused.message


def test_a_broken_rule_fails_closed_and_never_crashes() -> None:
    broken = rule(enforce={"action": "allow", "conditions": [{"expression": "object.("}]})
    refused = check(state_with(broken), ALICE, "CREATE", configmap(), **CM)
    assert not refused.allowed
    assert "cannot be evaluated" in refused.message
