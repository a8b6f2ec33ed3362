"""Backtracking patterns (issue 29): a pattern from configuration or a tenant must not let one object stall
admission, and a pattern the linear-time engine cannot run is refused at the API with its field named.

``([a-z0-9]+-?)+\\.example\\.com`` is a plausible administrator's hostname pattern; on Python's ``re`` a
24-character near miss took 2.4 s and each two more characters four times longer, so a 34-character host held
the admission replica for about 40 minutes. Every pattern now runs on RE2 (:mod:`enclave_core.patterns`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, create_namespace
from enclave_testing.waiting import poll

from .conftest import as_user, owned_namespace

PATHOLOGICAL = r"([a-z0-9]+-?)+\.example\.com"
NEAR_MISS = "a" * 34 + ".example.org"
"""34 characters the pattern almost matches: minutes of backtracking on ``re``, microseconds on RE2."""
DECIDED_WITHIN = 1.0
"""Seconds a request may take end to end through kube-apiserver and the webhook (the webhook timeout is 5)."""


def _ingress(name: str, *hosts: str) -> dict[str, Any]:
    backend = {"service": {"name": "web", "port": {"number": 80}}}
    return {
        "metadata": {"name": name},
        "spec": {
            "rules": [
                {"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}
                for host in hosts
            ]
        },
    }


def rules_compiled(stack: TenancyStack, namespace: str, size: int) -> None:
    """Until the namespace's RuleStatus shows ``size`` rules (the Rules snapshot is published before)."""
    custom = client.CustomObjectsApi(stack.kube)

    def compiled() -> bool:
        try:
            found = custom.get_namespaced_custom_object("enclave.dev", "v1beta2", namespace, "rulestatuses", "default")
        except ApiException:
            return False
        return bool((found.get("status") or {}).get("size") == size)

    poll(compiled, timeout=30, what=f"the RuleStatus of {namespace} with {size} rule(s)")


def _timed(call: Callable[[], Any]) -> tuple[float, Exception | None]:
    started = time.perf_counter()
    try:
        call()
    except Exception as err:  # the caller inspects what happened
        return time.perf_counter() - started, err
    return time.perf_counter() - started, None


def test_backtracking_hostname_pattern_on_a_long_ingress_host_is_refused(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """An allow rule with the pathological hostname pattern and an Ingress whose hosts nearly match: the Ingress
    is refused by the rule within a second, and another tenant's namespace create meanwhile succeeds."""
    owner = unique("rex")
    rule = {"enforce": {"action": "allow", "ingress": {"hostnames": [{"exp": PATHOLOGICAL}]}}}
    _, namespace = owned_namespace(fence, impersonate, owner, rules=[rule])
    rules_compiled(fence, namespace, 1)
    networking = client.NetworkingV1Api(as_user(impersonate, owner))
    # The rule is in force: a matching host passes, another domain is refused.
    networking.create_namespaced_ingress(namespace, _ingress("fine", "team-a-web.example.com"))
    with pytest.raises(ApiException) as other:
        networking.create_namespaced_ingress(namespace, _ingress("other", "web.example.net"))
    assert other.value.status == 403

    bystander = unique("byst")
    fence.tenant(bystander, [{"kind": "User", "name": bystander}])

    hosts = (NEAR_MISS, "b" * 60 + ".example.org", "c-" * 30 + "x.example.org")
    attack: dict[str, tuple[float, Exception | None]] = {}
    thread = threading.Thread(
        target=lambda: attack.setdefault(
            "result", _timed(lambda: networking.create_namespaced_ingress(namespace, _ingress("slow", *hosts)))
        )
    )
    thread.start()
    create_namespace(as_user(impersonate, bystander), f"{bystander}-a")  # retries only "no tenant yet"
    thread.join(timeout=30)
    assert not thread.is_alive(), "the Ingress create never returned"
    elapsed, error = attack["result"]
    assert isinstance(error, ApiException), f"the Ingress with hosts {hosts} was admitted"
    assert error.status == 403, error.body
    assert "denied the request" in str(error.body), error.body
    assert NEAR_MISS in str(error.body), error.body
    assert elapsed < DECIDED_WITHIN, f"the Ingress took {elapsed:.2f} s to decide"


def test_backtracking_denied_regex_on_a_namespace_label_is_decided_fast(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """A Tenant's forbiddenLabels deniedRegex with nested quantifiers, and an owner's namespace with a long label
    key that nearly matches it: decided (admitted) within a second; a matching key is refused."""
    owner = unique("rexl")
    options = {"forbiddenLabels": {"deniedRegex": PATHOLOGICAL}}
    tenant, _ = owned_namespace(fence, impersonate, owner, namespaceOptions=options)
    core = client.CoreV1Api(as_user(impersonate, owner))
    key = "a" * 40
    elapsed, error = _timed(lambda: core.create_namespace({"metadata": {"name": f"{tenant}-b", "labels": {key: "x"}}}))
    assert error is None, getattr(error, "body", error)
    assert elapsed < DECIDED_WITHIN, f"the namespace took {elapsed:.2f} s to decide"
    with pytest.raises(ApiException) as refused:
        core.create_namespace({"metadata": {"name": f"{tenant}-c", "labels": {"team-a.example.com/x": "y"}}})
    assert refused.value.status == 403, refused.value.body
    assert "denied regular expression" in str(refused.value.body), refused.value.body


@pytest.mark.parametrize(
    ("field", "spec", "hint"),
    [
        (
            "spec.rules[0].enforce.ingress.hostnames[0].exp",
            {"rules": [{"enforce": {"action": "allow", "ingress": {"hostnames": [{"exp": r"(a+)\1\.example"}]}}}]},
            "backreferences",
        ),
        (
            "spec.namespaceOptions.forbiddenLabels.deniedRegex",
            {"namespaceOptions": {"forbiddenLabels": {"deniedRegex": r"^(?!team-).*"}}},
            "lookahead",
        ),
    ],
    ids=["rule-exp-backreference", "denied-regex-lookahead"],
)
def test_pattern_the_linear_time_engine_cannot_run_is_refused(
    fence: TenancyStack, field: str, spec: dict[str, Any], hint: str
) -> None:
    """A Tenant whose pattern needs backtracking (a backreference, a lookahead) is refused at the API, naming
    the field and why, instead of being stored and applied without it."""
    name = unique("rexbad")
    with pytest.raises(ApiException) as refused:
        fence.tenant(name, [{"kind": "User", "name": name}], **spec)
    body = str(refused.value.body)
    assert refused.value.status in (400, 403, 422), body
    assert field in body, body
    assert hint in body, body
