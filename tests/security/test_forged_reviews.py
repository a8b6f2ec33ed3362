"""Forged AdmissionReviews: a pod that reaches the admission port posts reviews kube-apiserver never sent.

The fence's admission runs with client authentication (kube-apiserver presents its webhook client certificate),
so a caller without one is someone admission did not authenticate. Had such a review reached a decision, it
could hold a victim tenant's namespace quota with ledger reservations (each lasting the reservation TTL) and
write deny Events in Enclave's namespace. These prove it reaches neither: no reservation on the tenant's
QuantityLedger and no Event, while the same requests made through kube-apiserver get both.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.names import TENANT_LABEL
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack
from enclave_testing.waiting import poll
from enclave_testing.webhooks import namespace_creation_review

from .conftest import USERS, as_user

GROUP, VERSION = "enclave.dev", "v1beta2"


def webhook_url(stack: TenancyStack) -> str:
    return next(running for running in stack.processes if running.spec.name == "admission").webhook_url


def forge(stack: TenancyStack, path: str, review: dict[str, Any]) -> int:
    """POST ``review`` to ``path`` without a client certificate, as a pod on the network could: the status."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(
        f"{webhook_url(stack)}{path}", data=json.dumps(review).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def ledger_of(stack: TenancyStack, tenant: str) -> dict[str, Any]:
    """The tenant's namespace-quota QuantityLedger (enclave-tenants creates it for a tenant with a quota)."""
    custom = client.CustomObjectsApi(stack.kube)

    def find() -> dict[str, Any] | None:
        for item in custom.list_namespaced_custom_object(GROUP, VERSION, stack.namespace, "quantityledgers")["items"]:
            if ((item.get("spec") or {}).get("targetRef") or {}).get("name") == tenant:
                return dict(item)
        return None

    found: dict[str, Any] = poll(find, timeout=30, what=f"the namespace quota ledger of {tenant}")
    return found


def reservations(ledger: dict[str, Any]) -> list[dict[str, Any]]:
    return list((ledger.get("status") or {}).get("reservations") or [])


def test_a_forged_namespace_review_without_a_certificate_reserves_no_quota_is_refused(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """Three forged creations for a tenant with a quota of one: none answered, none reserved, and the owner's
    one namespace is still there to take through kube-apiserver."""
    owner = unique("forged-owner")
    tenant = unique("forged")
    fence.tenant(tenant, [{"kind": "User", "name": owner}], namespaceOptions={"quota": 1})
    ledger_of(fence, tenant)
    for index in range(3):
        review = namespace_creation_review(
            owner, [USERS], {"name": f"{tenant}-f{index}", "labels": {TENANT_LABEL: tenant}}
        )
        assert forge(fence, "/namespaces", review) == 403
        assert forge(fence, "/namespaces/mutate", review) == 403
    assert reservations(ledger_of(fence, tenant)) == []
    api = client.CoreV1Api(as_user(impersonate, owner))
    name = f"{tenant}-real"

    def create() -> bool:
        try:
            api.create_namespace({"metadata": {"name": name}})
        except ApiException as err:
            if "no tenant" in str(err.body) or "not ready" in str(err.body):
                return False  # the snapshot has not shown the tenant yet
            raise
        return True

    try:
        poll(create, timeout=30, what=f"the owner's namespace {name}")
    finally:
        client.CoreV1Api(fence.kube).delete_namespace(name)


def test_a_forged_review_without_a_certificate_posts_no_event_is_refused(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """A forged review that would be denied (a stranger claiming a tenant's namespace) writes no deny Event; the
    same claim made through kube-apiserver afterwards does, so the absence is not a slow queue."""
    owner, stranger = unique("forged-owner"), unique("forged-stranger")
    tenant = unique("forgedev")
    fence.tenant(tenant, [{"kind": "User", "name": owner}])
    forged = f"{tenant}-forged"
    review = namespace_creation_review(stranger, [USERS], {"name": forged, "labels": {TENANT_LABEL: tenant}})
    assert forge(fence, "/namespaces", review) == 403
    real = f"{tenant}-claimed"
    as_stranger = client.CoreV1Api(as_user(impersonate, stranger))
    with pytest.raises(ApiException) as refused:
        as_stranger.create_namespace({"metadata": {"name": real, "labels": {TENANT_LABEL: tenant}}})
    assert refused.value.status == 403
    core = client.CoreV1Api(fence.kube)

    def named() -> set[str]:
        return {event.involved_object.name for event in core.list_namespaced_event(fence.namespace).items}

    poll(lambda: real in named(), timeout=30, what="the deny Event of the claim made through kube-apiserver")
    assert forged not in named()
