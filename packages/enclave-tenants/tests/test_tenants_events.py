"""The NamespaceSynced Event: one per tenant and write pass, within kube-apiserver's size limit."""

from __future__ import annotations

from enclave_core.kube.events import MESSAGE_LIMIT
from enclave_tenants.reporting import synced_message


def test_one_namespace_is_told_as_before() -> None:
    assert synced_message(["namespace a: created RoleBindings x"]) == "namespace a: created RoleBindings x"


def test_many_namespaces_share_one_event_and_the_rest_are_counted() -> None:
    done = [f"namespace solar-{index:04d}: created RoleBindings enclave-user-alice-admin" for index in range(1000)]
    message = synced_message(done)
    assert len(message) <= MESSAGE_LIMIT
    assert message.startswith("1000 namespaces: namespace solar-0000: created")
    shown = message.count("namespace solar-")
    assert message.endswith(f"; and {1000 - shown} more")
    assert synced_message(done[:3]) == "3 namespaces: " + "; ".join(done[:3])
