"""``enclave test`` answers alike under both rules engines for every native differential case (issue 34).

Each case of :mod:`.test_rules_native_differential` (whatever areas the compiler has grown since) becomes the
offline world ``enclave test`` reads: a ServiceConfiguration, the tenant with the case's rules, its namespace.
Every request is decided by the CLI under ``webhook`` (admission's functions) and under ``native`` (the
policies enclave-tenants compiles, judged locally as kube-apiserver does, and the webhook for what stays on it);
:func:`enclave_cli.testing.differences` must find nothing. Pure evaluation: no control plane (the differential
module itself checks the local policy evaluation against kube-apiserver's own decision).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from enclave_cli import testing
from enclave_cli.areas import NO_USAGE
from enclave_cli.documents import Document
from enclave_cli.engine import NATIVE, Request, resource_of
from enclave_cli.policy_cel import functions_used
from enclave_cli.world import Compiled, World, compile_world
from enclave_core import cel
from enclave_core.api.names import TENANT_LABEL
from enclave_tenants.native.minors import offered_from
from enclave_testing.binaries import supported_kubernetes_minors

from . import test_rules_native_differential as differential
from .offline import KINDS, cli_request
from .test_rules_native_differential import CASES, Case
from .test_rules_native_differential import Request as Sent

TENANT, NAMESPACE, USERS = "nat", "nat-dev", "enclave.dev"
USER_NAMES = {"owner": "owner", "other": "other"}


def world(case: Case) -> Compiled:
    """The case's objects as a directory for ``enclave test`` would hold them."""
    return world_of(case.rules)


def world_of(rules: list[dict[str, Any]]) -> Compiled:
    """A ServiceConfiguration, the tenant with ``rules`` and its namespace, compiled as ``enclave test`` does."""
    rules = json.loads(json.dumps(rules).replace('"OTHER"', json.dumps(USER_NAMES["other"])))
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "enclave.dev/v1beta2",
            "kind": "ServiceConfiguration",
            "metadata": {"name": "default"},
            "spec": {"users": [{"kind": "Group", "name": USERS}], "rules": {"engine": "both"}},
        },
        {
            "apiVersion": "enclave.dev/v1beta2",
            "kind": "Tenant",
            "metadata": {"name": TENANT},
            "spec": {"owners": [{"kind": "User", "name": USER_NAMES["owner"]}], "rules": rules},
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {TENANT_LABEL: TENANT}}},
    ]
    return compile_world(World.collect([Document(Path("differential"), 1, obj) for obj in objects]))


def request(sent: Sent, name: str) -> Request:
    """The request kube-apiserver would send admission for the differential test's call (a resource of an API
    group with the kind the differential gives it)."""
    group: str = getattr(sent, "group", "")
    kind = {**KINDS, **getattr(differential, "_KINDS", {})}[sent.kind]
    return cli_request(sent.kind, sent.body, sent.old, USER_NAMES[sent.user], name, NAMESPACE, group=group, kind=kind)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_enclave_test_answers_alike_under_both_engines(case: Case) -> None:
    compiled = world(case)
    assert compiled.engine == "both"
    usage = NO_USAGE
    for number, sent in enumerate(case.requests):
        asked = request(sent, f"r{number}")
        webhook = testing.decide(asked, usage, compiled, "webhook")
        native = testing.decide(asked, usage, compiled, "native")
        where = f"{case.name} request {number}: {sent.body}"
        assert not testing.differences(webhook, native), (where, testing.differences(webhook, native))
        assert not any(step.path == NATIVE for step in webhook.steps), where


WORKLOAD_REQUESTS: list[Any] = getattr(differential, "WORKLOAD_REQUESTS", [])
"""The differential's workload catalogue requests, once the workload areas compile (issue 34)."""


def workload_request(sent: Any, name: str) -> Request:
    """A workload request of the differential (a create, a patch of ``old``, or an ephemeral container added
    to ``old``) as kube-apiserver sends it to admission."""
    shown = sent.old if sent.old is not None else sent.body
    group, resource = resource_of(shown["kind"], shown["apiVersion"])
    body, sub = sent.body, ""
    if sent.debug is not None:
        body, resource, sub = {"spec": {"ephemeralContainers": [sent.debug]}}, "pods", "ephemeralcontainers"
    return cli_request(
        resource,
        body,
        sent.old,
        USER_NAMES["owner"],
        name,
        NAMESPACE,
        group=group,
        kind=shown["kind"],
        sub_resource=sub,
    )


def test_enclave_test_answers_workloads_alike_under_both_engines() -> None:
    if not WORKLOAD_REQUESTS:
        pytest.skip("the differential has no workload requests (workload rules do not compile natively yet)")
    compiled = world_of(getattr(differential, "_workload_rules")())  # noqa: B009 (absent until workloads compile)
    for number, sent in enumerate(WORKLOAD_REQUESTS):
        asked = workload_request(sent, f"w{number}")
        webhook = testing.decide(asked, NO_USAGE, compiled, "webhook")
        native = testing.decide(asked, NO_USAGE, compiled, "native")
        assert not testing.differences(webhook, native), (sent.name, testing.differences(webhook, native))
        assert not (sent.refused and native.allowed), sent.name


def test_the_policies_decide_where_they_compile() -> None:
    """Not a comparison of the webhook with itself: in a namespace whose rules all compile, the native outcome
    comes from the policies, the ``resources`` hook is not called, and a refusal is the policy's."""
    case = next(case for case in CASES if case.name == "deny-value")
    compiled = world(case)
    native = testing.decide(request(case.requests[0], "r0"), NO_USAGE, compiled, "native")
    assert native.result == "denied"
    assert native.denial is not None
    assert native.denial.path == NATIVE
    assert "resources.enclave.dev" in native.passed_over
    assert native.message == "Tenant nat spec.rules[0] denies metadata.labels['env']='prod' (matches exact ['prod'])"


CONFORMANCE = Path(__file__).resolve().parents[3] / "packages" / "enclave-core" / "tests" / "cel" / "conformance.yaml"


def test_every_function_the_compiled_policies_call_is_in_the_cel_conformance_suite() -> None:
    """The local evaluation is only as good as the engine's Kubernetes library: every function the compiled
    policies of the differential cases call (new areas bring new ones) must be exercised by enclave-core's CEL
    conformance suite, which is written to kube-apiserver's semantics. A function missing here needs conformance
    cases first."""
    env = cel.Environment.of(
        "conformance",
        object=cel.VarType.DYN,
        oldObject=cel.VarType.DYN,
        request=cel.VarType.DYN,
        now=cel.VarType.TIMESTAMP,
    )
    covered: set[str] = set()
    for entry in yaml.safe_load(CONFORMANCE.read_text()):
        if entry.get("compile_error"):
            continue
        facts = cel.default().compile(entry["expr"], env).compiled.facts
        covered |= facts.functions if facts is not None else set()
    used: set[str] = set()
    for case in CASES:
        for found in world(case).native("native").namespaces.values():
            for obj in found.objects:
                if obj["kind"] == "ValidatingAdmissionPolicy":
                    used |= functions_used(obj)
    assert {"cidr", "containsCIDR", "matches", "orValue"} <= used
    assert used <= covered, sorted(used - covered)
    # and kube-apiserver offers each to a new policy on every supported minor (enclave_tenants.native.minors)
    oldest = min(tuple(int(part) for part in minor.split(".")) for minor in supported_kubernetes_minors())
    late = {name: offered_from(name) for name in used if (offered_from(name) or (99, 0)) > oldest}
    assert not late, late
