"""What the advisory and benchmark suites share: who the attacker is, what RBAC it was given, and how a refusal
looks from its side.

An attack test must show that *Enclave* stopped the request, not that RBAC never let it reach Enclave: where an
advisory assumes the attacker holds a right (Capsule's CVE-2024-39690 assumes "patch namespaces"), the test grants
exactly that right with :func:`granted` and then expects the admission webhook's denial (:func:`denied`). Where
the defence *is* RBAC (the benchmark's "block access to cluster resources"), :func:`forbidden` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from enclave_testing.rbac import granted as granted  # the suite's modules import it from here
from enclave_testing.waiting import poll

GROUP, VERSION = "enclave.dev", "v1beta2"
TENANT_LABEL = "enclave.dev/tenant"


def _failure(call: Callable[[], Any]) -> ApiException:
    try:
        call()
    except ApiException as err:
        return err
    raise AssertionError("the attack was admitted")


def denied(call: Callable[[], Any], *fragments: str) -> str:
    """The body of the admission webhook's denial of ``call``, which must name every fragment."""
    err = _failure(call)
    body = str(err.body or "")
    assert err.status in (400, 403, 422), body
    assert "denied the request" in body, body
    for fragment in fragments:
        assert fragment in body, body
    return body


def eventually_denied(call: Callable[[], Any], *fragments: str, timeout: float = 20) -> str:
    """As :func:`denied`, retried while admission's snapshot (rules, tenancy) is on its way: an admitted attempt
    is undone by ``call``'s own caller only if it cleans up, so use it with idempotent or failing calls."""

    def attempt() -> str | None:
        try:
            return denied(call, *fragments)
        except AssertionError:
            return None

    found: str = poll(attempt, timeout=timeout, interval=0.25, what=f"a denial naming {fragments}")
    return found


def forbidden(call: Callable[[], Any]) -> None:
    """``call`` is refused by kube-apiserver's authorization (RBAC), before any webhook."""
    err = _failure(call)
    assert err.status == 403, err.body
    assert "denied the request" not in str(err.body), err.body


def service_account_client(impersonate: Callable[..., Any], namespace: str, name: str) -> Any:
    """An ApiClient acting as service account ``namespace/name`` with the groups kube-apiserver gives it."""
    return impersonate(
        f"system:serviceaccount:{namespace}:{name}",
        ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
    )
