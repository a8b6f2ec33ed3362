"""Promotion, node metadata, tenant deletion and ServiceConfiguration validation, decided from snapshots."""

from __future__ import annotations

from admission_helpers import ADMIN, ALICE, make_state, request, tenant, user

from enclave_admission.configuration import validation as configuration
from enclave_admission.defaults import url_client, webhooks
from enclave_admission.nodes import validation as nodes
from enclave_admission.serviceaccounts import validation as serviceaccounts
from enclave_admission.tenants import validation as tenants
from enclave_core.api.configuration import ServiceConfigurationSpec
from enclave_core.api.meta import Entity
from enclave_core.api.names import PROMOTED_LABEL
from enclave_core.api.validation import service_configuration_problems

ROBOT = "system:serviceaccount:solar-a:robot"


def account(name: str, namespace: str, promoted: str | None = None) -> dict[str, object]:
    labels = {PROMOTED_LABEL: promoted} if promoted is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
    }


def promote(who: tuple[str, tuple[str, ...]], name: str = "robot", namespace: str = "solar-a", value: str = "true"):  # type: ignore[no-untyped-def]
    return request(
        who,
        "UPDATE",
        account(name, namespace, value),
        account(name, namespace),
        resource="serviceaccounts",
        kind="ServiceAccount",
        namespace=namespace,
    )


def promotion_state(allow: bool = True):  # type: ignore[no-untyped-def]
    solar = tenant(
        "solar",
        "alice",
        namespaces=["solar-a"],
        extra_owners=[Entity(kind="ServiceAccount", name=ROBOT)],
        promoted=[Entity(kind="ServiceAccount", name=ROBOT)],
    )
    oil = tenant("oil", "bob", namespaces=["oil-a"])
    return make_state([solar, oil], allow_service_account_promotion=allow)


def test_owner_promotes_a_service_account_of_their_tenant() -> None:
    decision = serviceaccounts.validate(promote(ALICE, "builder"), promotion_state())
    assert decision.allowed
    assert decision.reason == "Promoted"


def test_promotion_refusals() -> None:
    state = promotion_state()
    assert serviceaccounts.validate(promote(user("bob", "enclave.dev"), "builder"), state).reason == "TenantNotOwned"
    assert (
        serviceaccounts.validate(promote((ROBOT, ("system:serviceaccounts",)), "other"), state).reason
        == "PromotedCannotPromote"
    )
    assert serviceaccounts.validate(promote(ALICE, "x", "default"), state).reason == "NotATenantNamespace"
    assert serviceaccounts.validate(promote(ALICE, "builder", value="yes"), state).reason == "InvalidPromotion"
    assert (
        serviceaccounts.validate(promote(ALICE, "builder"), promotion_state(allow=False)).reason == "PromotionDisabled"
    )


def test_unchanged_promotion_label_passes_and_only_owners_and_cluster_administrators_change_it() -> None:
    state = promotion_state()
    same = request(
        ALICE,
        "UPDATE",
        account("a", "solar-a", "true"),
        account("a", "solar-a", "true"),
        resource="serviceaccounts",
        namespace="solar-a",
    )
    assert serviceaccounts.validate(same, state).allowed
    assert serviceaccounts.validate(promote(ADMIN, "builder"), state).allowed
    assert serviceaccounts.validate(promote(user("root", "system:masters"), "builder"), state).allowed
    # anyone else with rights in the namespace (edit), Enclave's own accounts included, is refused
    for who in (
        user("ops"),
        user("system:serviceaccount:enclave-system:enclave-replication", "system:serviceaccounts"),
    ):
        decision = serviceaccounts.validate(promote(who, "builder"), state)
        assert decision.reason == "TenantNotOwned", who
        assert "solar" not in decision.message.replace("solar-a", "")
        demote = request(
            who,
            "UPDATE",
            account("robot", "solar-a"),
            account("robot", "solar-a", "true"),
            resource="serviceaccounts",
            namespace="solar-a",
        )
        assert serviceaccounts.validate(demote, state).reason == "TenantNotOwned"


def test_outside_tenants_only_cluster_administrators_write_the_promotion_label() -> None:
    state = promotion_state()
    assert serviceaccounts.validate(promote(user("ops"), "ci", "tools"), state).reason == "NotATenantNamespace"
    assert serviceaccounts.validate(promote(ADMIN, "ci", "tools"), state).reason == "NotATenantNamespace"
    assert serviceaccounts.validate(promote(user("root", "system:masters"), "ci", "tools"), state).allowed


def test_a_refusal_to_an_owner_of_another_tenant_does_not_name_the_tenant() -> None:
    decision = serviceaccounts.validate(promote(user("bob", "enclave.dev"), "builder"), promotion_state())
    assert decision.reason == "TenantNotOwned"
    assert "another tenant" in decision.message
    assert "solar" not in decision.message.replace("solar-a", "")


def node(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": labels, "annotations": annotations or {}},
    }


def test_node_metadata_denied_keys() -> None:
    state = make_state(
        [tenant("solar", "alice")],
        node_metadata={
            "forbidden_labels": {"denied": ["pool"], "denied_regex": "^node-role\\."},
            "forbidden_annotations": {"denied": ["x"]},
        },
    )

    def update(new: dict[str, object], who: tuple[str, tuple[str, ...]] = ALICE):  # type: ignore[no-untyped-def]
        return nodes.validate(request(who, "UPDATE", new, node({"pool": "a"}), resource="nodes", kind="Node"), state)

    assert update(node({"pool": "b"})).reason == "ForbiddenNodeMetadata"
    assert update(node({})).reason == "ForbiddenNodeMetadata"  # removing counts
    assert update(node({"pool": "a", "node-role.kubernetes.io/x": ""})).reason == "ForbiddenNodeMetadata"
    assert update(node({"pool": "a"}, {"x": "1"})).reason == "ForbiddenNodeMetadata"
    assert update(node({"pool": "a", "mine": "1"})).allowed
    assert update(node({"pool": "b"}), ADMIN).allowed


def test_tenant_deletion_prevented() -> None:
    state = make_state([tenant("solar", "alice", prevent_deletion=True), tenant("oil", "bob")])
    for who in (ALICE, ADMIN, user("ops")):
        gone = tenants.validate(
            request(
                who,
                "DELETE",
                None,
                {"metadata": {"name": "solar"}, "spec": {"preventDeletion": True}},
                resource="tenants",
                group="enclave.dev",
                kind="Tenant",
            ),
            state,
        )
        assert not gone.allowed
        assert gone.reason == "TenantDeletionPrevented"
    ok = tenants.validate(
        request(
            ADMIN, "DELETE", None, {"metadata": {"name": "oil"}}, resource="tenants", group="enclave.dev", kind="Tenant"
        ),
        state,
    )
    assert ok.allowed


def config_request(spec: dict[str, object]):  # type: ignore[no-untyped-def]
    obj = {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "ServiceConfiguration",
        "metadata": {"name": "default"},
        "spec": spec,
    }
    return request(
        ADMIN, "UPDATE", obj, obj, resource="serviceconfigurations", group="enclave.dev", kind="ServiceConfiguration"
    )


def test_service_configuration_problems_name_the_field() -> None:
    state = make_state([])
    decision = configuration.validate(config_request({"protectedNamespaceRegex": "(["}), state)
    assert not decision.allowed
    assert "spec.protectedNamespaceRegex" in decision.message
    decision = configuration.validate(config_request({"unknownField": 1}), state)
    assert not decision.allowed
    assert "unknownField" in decision.message
    assert configuration.validate(config_request({"forceTenantPrefix": True}), state).allowed


def test_default_webhooks_are_a_valid_configuration() -> None:
    admission = webhooks(url_client("https://127.0.0.1:9443"), nodes=True)
    spec = ServiceConfigurationSpec(admission=admission)
    assert service_configuration_problems(spec) == []
    assert ServiceConfigurationSpec.model_validate(spec.to_k8s()) == spec
    validating = admission.validating
    assert validating is not None
    names = {hook.path: hook for hook in validating.webhooks or []}
    namespace_rule = (names["/namespaces"].rules or [])[0]
    assert namespace_rule.resources == ["namespaces", "namespaces/status", "namespaces/finalize"]
    assert all(hook.timeout_seconds <= 5 for hook in names.values())
    assert "/nodes" not in {hook.path for hook in (webhooks(url_client("https://x:1")).validating.webhooks or [])}  # type: ignore[union-attr]
