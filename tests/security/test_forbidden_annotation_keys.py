"""A tenant's ``namespaceOptions.forbiddenAnnotations.denied``: the exact annotation keys its owners may not put
on their namespaces (the regular-expression form and the label lists are proven in test_capsule_advisories)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client

from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack

from .conftest import as_user, owned_namespace
from .tenant_attacks import denied

DENIED_KEY = "scheduler.example.com/pool"


def test_a_namespace_created_with_a_denied_annotation_key_is_refused(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """The owner creates a namespace carrying a key the tenant denies by name: refused, naming the key; a key that
    merely starts the same way is not that key and passes (an exact list, not a prefix)."""
    owner = unique("mallory")
    options = {"forbiddenAnnotations": {"denied": [DENIED_KEY]}}
    tenant, _ = owned_namespace(fence, impersonate, owner, namespaceOptions=options)
    api = client.CoreV1Api(as_user(impersonate, owner))
    body = {"metadata": {"name": f"{tenant}-pinned", "annotations": {DENIED_KEY: "gpu"}}}
    denied(lambda: api.create_namespace(body), DENIED_KEY)
    similar = {"metadata": {"name": f"{tenant}-similar", "annotations": {f"{DENIED_KEY}-hint": "gpu"}}}
    api.create_namespace(similar)
    client.CoreV1Api(fence.kube).delete_namespace(f"{tenant}-similar")
