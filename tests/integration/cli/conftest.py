"""The tenancy stack with the policy directory's objects, shared by the CLI's integration tests.

config, tenants and admission run as processes (``enclave_testing.stack.start_tenancy``); the directory's
ServiceConfiguration settings are patched into the stack's configuration and its Tenants, TenantOwners,
Namespaces and ServiceAccounts are created in the cluster, so the controllers compile and stream them as in
production.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_admission.review import Decision
from enclave_cli import testing
from enclave_cli.engine import Hook, Outcome, evaluate
from enclave_cli.world import compile_world
from enclave_testing.controlplane import ControlPlane
from enclave_testing.stack import TenancyStack, start_tenancy
from enclave_testing.waiting import poll

POLICIES = Path(__file__).resolve().parents[3] / "packages" / "enclave-cli" / "tests" / "policies"
WORLD = testing.load_world([POLICIES])
CASES = testing.collect_cases(WORLD)
GROUP, VERSION = "enclave.dev", "v1beta2"
_STACK_OWNED = ("admission", "events", "rbac", "enableTLSReconciler")


class Remote:
    """Decides by POSTing each review to the running admission server, as kube-apiserver does.

    The HTTP answer carries the result, the message, the patch and warnings, and for a denial ``status``
    ``{code: 403, reason: Forbidden}`` (checked here on every answer), but not the decision's CamelCase
    reason (``TenantCordoned``), which is what ``enclave test`` reports and ``expect.reason`` matches. The
    server writes that reason into its decision log line, keyed by the review's uid: the reason of each
    answer is read from there, so the comparison covers it too.
    """

    def __init__(self, stack: TenancyStack, url: str, plane: ControlPlane, log_path: Path) -> None:
        secret = client.CoreV1Api(stack.kube).read_namespaced_secret("enclave-tls", stack.namespace)
        self.context = ssl.create_default_context(cadata=base64.b64decode(secret.data["ca.crt"]).decode())
        self.context.load_cert_chain(*plane.webhook_client_cert)
        self.url = url
        self.log_path = log_path
        self._offset = 0
        self._reasons: dict[str, str] = {}

    def _reason(self, uid: str) -> str:
        """The reason admission logged for review ``uid`` (its decision lines are written within a loop turn)."""

        def logged() -> bool:
            with self.log_path.open("rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._offset += len(complete)
            for line in complete.splitlines():
                if b'"msg":"decision"' in line:
                    entry = json.loads(line)
                    self._reasons[str(entry["uid"])] = str(entry["reason"])
            return uid in self._reasons

        poll(logged, timeout=10, interval=0.05, what=f"admission's decision line for review {uid}")
        return self._reasons.pop(uid)

    def __call__(self, hook: Hook, review: dict[str, Any]) -> Decision:
        body = json.dumps(review).encode()
        request = urllib.request.Request(
            self.url + hook.path, body, {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, context=self.context, timeout=10) as answer:
            response = json.loads(answer.read())["response"]
        patch = json.loads(base64.b64decode(response["patch"])) if response.get("patch") else []
        status = response.get("status") or {}
        if response["allowed"]:
            assert not status, status
        else:
            assert (status.get("code"), status.get("reason")) == (403, "Forbidden"), status
        reason = self._reason(review["request"]["uid"])
        return Decision(
            bool(response["allowed"]),
            reason,
            status.get("message", ""),
            tuple(patch),
            warnings=tuple(response.get("warnings") or ()),
        )


def _uidless(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<uid>" if k == "uid" else _uidless(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_uidless(v) for v in value]
    return value


def _commuting(patch: Any) -> Any:
    """A patch of ``add`` operations on distinct paths in path order: applied in any order they store the same
    object, and the webhook and the local engine may list the keys of one mutation in different orders."""
    if not isinstance(patch, list) or not all(isinstance(op, dict) and op.get("op") == "add" for op in patch):
        return patch
    paths = [str(op.get("path")) for op in patch]
    if len(set(paths)) != len(paths):
        return patch
    return sorted(patch, key=lambda op: str(op.get("path")))


def answer(outcome: Outcome) -> tuple[str, str, Any, list[tuple[str, str]], list[str]]:
    """What a user sees (the result, the denial message, the patch with tenant uids masked, the warnings) and
    the reason each hook decided with."""
    reasons = [(step.hook, step.decision.reason) for step in outcome.steps]
    warnings = [warning for step in outcome.steps for warning in step.decision.warnings]
    return outcome.result, outcome.message, _commuting(_uidless(outcome.patch)), reasons, warnings


_PLURALS = {
    "Tenant": "tenants",
    "TenantOwner": "tenantowners",
    "ResourcePool": "resourcepools",
    "ResourcePoolClaim": "resourcepoolclaims",
    "GlobalResourceQuota": "globalresourcequotas",
    "CustomQuota": "customquotas",
    "GlobalCustomQuota": "globalcustomquotas",
}


def _create(kube: Any, body: dict[str, Any]) -> None:
    kind = body["kind"]
    namespace = body["metadata"].get("namespace")
    if kind == "Namespace":
        client.CoreV1Api(kube).create_namespace(body)
    elif kind == "ServiceAccount":
        client.CoreV1Api(kube).create_namespaced_service_account(namespace, body)
    elif namespace:
        client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, _PLURALS[kind], body)
    else:
        client.CustomObjectsApi(kube).create_cluster_custom_object(GROUP, VERSION, _PLURALS[kind], body)


def _delete(kube: Any, body: dict[str, Any]) -> None:
    kind, meta = body["kind"], body["metadata"]
    custom = client.CustomObjectsApi(kube)
    if kind == "Namespace":
        client.CoreV1Api(kube).delete_namespace(meta["name"])
    elif kind in ("ResourcePoolClaim", "CustomQuota"):
        custom.delete_namespaced_custom_object(GROUP, VERSION, meta["namespace"], _PLURALS[kind], meta["name"])
    elif kind in _PLURALS:
        custom.delete_cluster_custom_object(GROUP, VERSION, _PLURALS[kind], meta["name"])


def _bound(kube: Any, claim: dict[str, Any]) -> Callable[[], bool]:
    meta = claim["metadata"]

    def check() -> bool:
        found = client.CustomObjectsApi(kube).get_namespaced_custom_object(
            GROUP, VERSION, meta["namespace"], "resourcepoolclaims", meta["name"]
        )
        conditions = (found.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Bound" and c.get("status") == "True" for c in conditions)

    return check


def _creating_pod(kube: Any, namespace: str, pod: dict[str, Any]) -> Callable[[], Any]:
    return lambda: client.CoreV1Api(kube).create_namespaced_pod(namespace, pod)


def _usage_pods(kube: Any) -> list[tuple[str, str]]:
    """Pods that use, in the cluster, what the test manifests' ``usage`` states (one usage for every case: the
    cluster has one state). A Pod counts toward its namespace's ResourceQuotas while not terminal, scheduled
    or not (this control plane has no scheduler or kubelet)."""
    per_namespace: dict[str, dict[str, str]] = {}
    for area in ("pools", "global_resource_quotas"):
        usages = {json.dumps(getattr(c.usage, area), sort_keys=True) for c in CASES if getattr(c.usage, area)}
        assert len(usages) <= 1, f"the cluster can realise one {area} usage only: give those cases the same usage"
        for usage in usages:
            for amounts in json.loads(usage).values():
                for namespace, used in amounts.items():
                    per_namespace.setdefault(namespace, {}).update(used)
    created = []
    for namespace, used in per_namespace.items():
        assert set(used) <= {"requests.cpu", "requests.memory", "pods"}, used
        assert used.get("pods", "1") == "1", "one Pod per namespace realises the usage"
        requests = {key.split(".", 1)[1]: value for key, value in used.items() if key.startswith("requests.")}
        pod = {
            "metadata": {"name": "cli-usage", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": requests}}]},
        }
        poll(_creating_pod(kube, namespace, pod), what=f"the usage Pod in {namespace} (its quota may lag the claim)")
        created.append((namespace, "cli-usage"))
    counted = {json.dumps(c.usage.custom_quotas, sort_keys=True) for c in CASES if c.usage.custom_quotas}
    assert len(counted) <= 1, "the cluster can realise one custom quota usage only"
    for key, amount in json.loads(counted.pop() if counted else "{}").items():
        namespace, _, name = key.rpartition("/")
        quota = next(d for d in WORLD.custom_quotas if d.name == name)
        assert quota.data["spec"]["sources"] == [{"apiVersion": "v1", "kind": "Pod", "op": "count"}], (
            "a custom quota's usage is realised as Pods: only a quota counting Pods can be given one here"
        )
        for index in range(int(amount)):
            pod = {
                "metadata": {"name": f"cli-usage-{index}", "namespace": namespace},
                "spec": {"containers": [{"name": "c", "image": "pause"}]},
            }
            poll(_creating_pod(kube, namespace, pod), what=f"usage Pod {index} of {key} (its ledger may be new)")
            created.append((namespace, f"cli-usage-{index}"))
    return created


def _sized(stack: TenancyStack, name: str, size: int) -> Callable[[], bool]:
    return lambda: stack.tenant_status(name).get("size") == size


@pytest.fixture(scope="package")
def cluster(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[tuple[TenancyStack, Remote]]:
    assert WORLD.configuration is not None
    spec = {k: v for k, v in WORLD.configuration.data["spec"].items() if k not in _STACK_OWNED}
    stack = start_tenancy(control_plane, spec["users"], pools=True, globalquotas=True, quotas=True)
    kube = stack.kube
    custom = client.CustomObjectsApi(kube)
    world = [
        *(WORLD.tenants + WORLD.owners + WORLD.namespaces + WORLD.accounts),
        *(WORLD.pools + WORLD.claims + WORLD.global_quotas + WORLD.custom_quotas),
    ]
    objects = [d.data for d in world]
    pods: list[tuple[str, str]] = []
    try:
        custom.patch_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", stack.config_name, {"spec": spec})
        for body in objects:
            _create(kube, body)
        for document in WORLD.claims:
            poll(_bound(kube, document.data), what=f"claim {document.name} bound")
        pods = _usage_pods(kube)
        admission = next(p for p in stack.processes if p.spec.name == "admission")
        remote = Remote(stack, admission.webhook_url, control_plane, admission.process.log_path)
        sizes = {d.name: 0 for d in WORLD.tenants}
        for document in WORLD.namespaces:
            sizes[document.data["metadata"]["labels"]["enclave.dev/tenant"]] += 1
        for name, size in sizes.items():
            poll(_sized(stack, name, size), what=f"tenant {name} with {size} namespace(s)")
        compiled = compile_world(WORLD)
        offline = {case.name: answer(testing.run_case(case, compiled).outcome) for case in CASES}  # type: ignore[arg-type]

        def converged() -> bool:  # the snapshots reach admission asynchronously: wait for them, then compare
            return all(
                answer(evaluate(c.request, compiled.state(), compiled.namespace, remote)) == offline[c.name]
                for c in CASES
            )

        with contextlib.suppress(AssertionError):
            poll(converged, timeout=60, interval=0.5, what="admission's answers")
        yield stack, remote
    finally:
        for document in WORLD.tenants:
            with contextlib.suppress(ApiException):
                custom.patch_cluster_custom_object(
                    GROUP, VERSION, "tenants", document.name, {"spec": {"preventDeletion": False}}
                )
        for namespace, name in pods:
            with contextlib.suppress(ApiException):
                client.CoreV1Api(kube).delete_namespaced_pod(name, namespace)
        for body in reversed(objects):
            with contextlib.suppress(ApiException):
                _delete(kube, body)
        stack.close()
