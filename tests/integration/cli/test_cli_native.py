"""``enclave test --engine native`` against the cluster running ``spec.rules.engine: native`` (issue 34).

The stack's configuration is switched to the native engine: enclave-tenants compiles the tenants' rules into
ValidatingAdmissionPolicies and labels the namespaces whose rules they decide entirely, so kube-apiserver judges
them itself and the ``resources`` hooks are not called. Each policy case in such a namespace is then sent through
kube-apiserver as its user (a server-side dry run) and must get the answer ``enclave test`` computes offline
under the native engine, which is also the webhook engine's. The module leaves the engine as it found it, and
waits for the policies and labels to be gone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_cli import testing
from enclave_cli.cases import Case
from enclave_cli.engine import NATIVE
from enclave_cli.world import compile_world
from enclave_core.api.names import MANAGED_BY, NATIVE_RULES_LABEL, TENANTS_MANAGER
from enclave_testing.stack import TenancyStack
from enclave_testing.waiting import poll

from .conftest import CASES, GROUP, VERSION, WORLD, Remote

COMPILED = compile_world(WORLD)
NATIVE_RULES = COMPILED.native("native")
SENT = {"ConfigMap": "config_map", "Secret": "secret"}
NATIVE_CASES = [
    case
    for case in CASES
    if NATIVE_RULES.labelled(case.request.namespace)
    and case.request.operation == "CREATE"
    and case.request.kind in SENT
    and case.request.api_version == "v1"
]
OURS = f"{MANAGED_BY}={TENANTS_MANAGER}"


def _labelled(core: client.CoreV1Api, namespace: str, present: bool) -> Callable[[], bool]:
    def check() -> bool:
        labels = core.read_namespace(namespace).metadata.labels or {}
        return (NATIVE_RULES_LABEL in labels) == present

    return check


def _no_policies(registrations: client.AdmissionregistrationV1Api) -> Callable[[], bool]:
    return lambda: not registrations.list_validating_admission_policy(label_selector=OURS).items


@pytest.fixture(scope="module")
def native_engine(cluster: tuple[TenancyStack, Remote]) -> Iterator[TenancyStack]:
    """The stack's configuration on ``engine: native`` until every namespace of the cases is labelled."""
    stack, _ = cluster
    custom = client.CustomObjectsApi(stack.kube)
    core = client.CoreV1Api(stack.kube)
    registrations = client.AdmissionregistrationV1Api(stack.kube)
    namespaces = sorted({case.request.namespace for case in NATIVE_CASES})

    def engine(name: str) -> None:
        patch = {"spec": {"rules": {"engine": name}}}
        custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", stack.config_name, patch)

    engine("native")
    try:
        for namespace in namespaces:
            poll(_labelled(core, namespace, True), timeout=60, what=f"{namespace} labelled {NATIVE_RULES_LABEL}")
        yield stack
    finally:
        engine("webhook")
        for namespace in namespaces:
            poll(_labelled(core, namespace, False), timeout=60, what=f"{NATIVE_RULES_LABEL} gone from {namespace}")
        poll(_no_policies(registrations), timeout=60, what="enclave-tenants' policies gone")


def _through_kube_apiserver(impersonate: Callable[..., Any], case: Case) -> tuple[bool, str]:
    """(admitted, kube-apiserver's message) for the case's request as a dry-run create."""
    request = case.request
    assert request.obj is not None
    api = client.CoreV1Api(impersonate(request.user, list(request.groups)))
    create = getattr(api, f"create_namespaced_{SENT[request.kind]}")
    try:
        create(request.namespace, json.loads(json.dumps(request.obj)), dry_run="All")
    except ApiException as err:
        message = str(json.loads(err.body or "{}").get("message", err.body))
        if err.status not in (400, 403, 422) or not any(m in message for m in ("denied request", "denied the request")):
            raise
        return False, message
    return True, ""


def _rbac(stack: TenancyStack) -> None:
    """Every user of the cases may write in the namespace (authorization is not what is under test)."""
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    by_namespace: dict[str, set[str]] = {}
    for case in NATIVE_CASES:
        by_namespace.setdefault(case.request.namespace, set()).add(case.request.user)
    for namespace, users in by_namespace.items():
        body: dict[str, Any] = {
            "metadata": {"name": "cli-native-users"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in sorted(users)],
        }
        try:
            rbac.create_namespaced_role_binding(namespace, body)
        except ApiException as err:
            if err.status != 409:
                raise


def test_there_are_native_cases() -> None:
    assert len(NATIVE_CASES) >= 4, [case.name for case in NATIVE_CASES]


@pytest.mark.parametrize("case", NATIVE_CASES, ids=[case.name for case in NATIVE_CASES])
def test_kube_apiserver_answers_as_enclave_test_native(
    native_engine: TenancyStack, impersonate: Callable[..., Any], case: Case
) -> None:
    offline = testing.run_case(case, COMPILED, "native")
    assert offline.passed, offline.problems
    assert offline.outcome is not None
    both = testing.run_case(case, COMPILED, "both")
    assert both.passed, both.problems
    _rbac(native_engine)

    def answered() -> tuple[bool, str] | None:
        admitted, message = _through_kube_apiserver(impersonate, case)
        if "not yet synced" in message:  # a policy kube-apiserver has not loaded: the next refresh brings it
            return None
        return admitted, message

    admitted, message = poll(answered, timeout=30, what="kube-apiserver's answer")
    assert admitted == offline.outcome.allowed, (case.name, message, offline.outcome.message)
    if not admitted:
        assert offline.outcome.denial is not None
        assert offline.outcome.denial.path == NATIVE
        assert ": ValidatingAdmissionPolicy '" in message, message  # the policy refused, not the webhook
        assert message.split("denied request: ", 1)[1] == offline.outcome.message
