"""``enclave test``, ``check`` and ``explain`` offline: the policy cases, the output formats, and bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from enclave_cli import testing
from enclave_cli.__main__ import main
from enclave_cli.cases import Case
from enclave_cli.engine import evaluate
from enclave_cli.output import Style, table
from enclave_cli.world import compile_world

POLICIES = Path(__file__).parent / "policies"
WORLD = testing.load_world([POLICIES])
COMPILED = compile_world(WORLD)
CASES = testing.collect_cases(WORLD)


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 30
    paths = {step for case in CASES for step in (case.request.resource,)}
    assert {"namespaces", "tenants", "tenantowners", "serviceaccounts", "nodes", "serviceconfigurations"} <= paths
    assert {"configmaps", "secrets"} <= paths  # the rules hooks (/resources)
    assert {"resourcepools", "resourcepoolclaims"} <= paths  # pools, from the pools snapshot compiled offline
    assert {"globalresourcequotas", "pods"} <= paths  # shared quotas: their snapshot and ledgers compiled offline
    assert "customquotas" in paths  # custom quotas: their targets and ledgers compiled offline


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_policy_case(case: Case) -> None:
    result = testing.run_case(case, COMPILED)
    assert result.passed, "\n".join(result.problems)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_table_json_and_junit(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "test", str(POLICIES))
    assert code == 0
    assert f"{len(CASES)} passed, 0 failed" in out
    assert "\x1b[" not in out  # not a terminal: no colour
    code, out, _ = _run(capsys, "test", str(POLICIES), "--output", "json")
    body = json.loads(out)
    assert code == 0
    assert body["failed"] == 0
    cordoned = next(r for r in body["results"] if r["name"] == "nothing is created in a cordoned tenant")
    assert cordoned["decidedBy"] == "/namespaces"
    assert cordoned["reason"] == "TenantCordoned"
    code, out, _ = _run(capsys, "test", str(POLICIES), "-o", "junit", "-k", "cordoned")
    suites = ET.fromstring(out.split("?>", 1)[1])
    assert code == 0
    assert int(suites[0].get("tests") or 0) >= 2


def _copy_policies(tmp_path: Path) -> Path:
    for path in POLICIES.iterdir():
        (tmp_path / path.name).write_text(path.read_text())
    return tmp_path


def test_a_wrong_expectation_fails_with_exit_code_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _copy_policies(tmp_path)
    (tmp_path / "extra.test.yaml").write_text(
        "kind: EnclaveTest\nmetadata: {name: wrong}\ntests:\n- name: cordoned but expected allowed\n"
        "  user: bob\n  object: {apiVersion: v1, kind: Namespace, metadata: {name: cli-beta-x}}\n  expect: patched\n"
    )
    code, out, _ = _run(capsys, "test", str(tmp_path), "-k", "expected allowed")
    assert code == 1
    assert "FAIL" in out
    assert "expected patched, got denied: cannot create namespace 'cli-beta-x': tenant cli-beta is cordoned" in out
    code, out, _ = _run(capsys, "test", str(tmp_path), "-o", "junit", "-k", "expected allowed")
    assert code == 1
    assert "<failure" in out


@pytest.mark.parametrize(
    ("file", "text", "message"),
    [
        ("broken.yaml", "kind: Tenant\nmetadata: {name: x\nspec: {}\n", "broken.yaml:3: malformed YAML"),
        (
            "unknown.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n",
            "unknown.yaml:2: unknown kind 'Secret'",
        ),
        (
            "missing.test.yaml",
            "kind: EnclaveTest\ntests:\n- name: ghost\n  tenant: nope\n  user: a\n"
            "  object: {apiVersion: v1, kind: Namespace, metadata: {name: n}}\n  expect: allowed\n",
            "missing.test.yaml:4: test 'ghost' names tenant 'nope', which no file defines",
        ),
        (
            "badexpect.test.yaml",
            "kind: EnclaveTest\ntests:\n- name: x\n  user: a\n"
            "  object: {apiVersion: v1, kind: Namespace, metadata: {name: n}}\n  expect: {result: maybe}\n",
            "badexpect.test.yaml:6: expect.result must be one of allowed, patched, denied",
        ),
        (
            "badtenant.yaml",
            "apiVersion: enclave.dev/v1beta2\nkind: Tenant\nmetadata: {name: t}\nspec:\n  namespaceOptions:\n"
            "    quota: -1\n",
            "badtenant.yaml:6: Tenant 't': spec.namespaceOptions.quota",
        ),
        (
            "noobject.test.yaml",
            "kind: EnclaveTest\ntests:\n- name: x\n  user: a\n  operation: UPDATE\n"
            "  object: {apiVersion: v1, kind: Namespace, metadata: {name: n}}\n  expect: allowed\n",
            "noobject.test.yaml:3: an UPDATE needs oldObject",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], file: str, text: str, message: str
) -> None:
    _copy_policies(tmp_path)
    (tmp_path / file).write_text(text)
    code, out, err = _run(capsys, "test", str(tmp_path))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert message in err
    assert "Traceback" not in err


def test_no_such_path_and_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _run(capsys, "test", str(tmp_path / "absent"))
    assert code == 2
    assert "absent: no such file or directory" in err
    with pytest.raises(SystemExit) as exited:
        main(["test"])
    assert exited.value.code == 2


def test_check_valid_objects(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "check", str(POLICIES))
    assert code == 0, out
    assert "0 problem(s)" in out


def test_check_reports_every_problem_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "objects.yaml").write_text(
        "apiVersion: enclave.dev/v1beta2\nkind: ServiceConfiguration\nmetadata: {name: default}\nspec:\n"
        "  protectedNamespaceRegex: '(open'\n  cacheInvalidation: 10ms\n---\n"
        "apiVersion: enclave.dev/v1beta2\nkind: Tenant\nmetadata: {name: t}\nspec:\n  owners:\n"
        "  - {kind: Robot, name: r2}\n---\n"
        "apiVersion: enclave.dev/v1beta2\nkind: Tenant\nmetadata: {name: u}\nspec:\n  owners: [{kind: User, name: a}]\n"
        "  namespaceOptions:\n    forbiddenLabels: {deniedRegex: '[x'}\n---\n"
        "apiVersion: enclave.dev/v1beta2\nkind: Tenant\nmetadata: {name: v}\nspec:\n"
        "  owners: [{kind: User, name: 'system:kube-scheduler'}]\n"
    )
    code, out, _ = _run(capsys, "check", str(tmp_path))
    assert code == 1
    path = tmp_path / "objects.yaml"
    assert f"{path}:5: ServiceConfiguration 'default': spec.protectedNamespaceRegex: invalid regular expression" in out
    assert f"{path}:6: ServiceConfiguration 'default': spec.cacheInvalidation: must be at least 1s" in out
    assert f"{path}:13: Tenant 't': spec.owners.0.kind" in out
    assert "Tenant 'u': spec.namespaceOptions.forbiddenLabels.deniedRegex" in out
    assert "Tenant 'v': spec.owners[0].name: User 'system:kube-scheduler' cannot own a tenant" in out
    assert "5 problem(s)" in out


def test_explain_a_case_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "explain", str(POLICIES), "a group owner is an owner too (and the tenant is still cordoned)"
    )
    assert code == 0
    assert "role: tenant-user: owner of tenant cli-beta (as Group cli-beta-team)" in out
    # erin is in no group of spec.users (Group cli-tenants): fenced because she owns, and told so
    assert "not in the effective users (Group cli-tenants): fenced because they own a tenant" in out
    assert "1. namespaces.mutate.enclave.dev (/namespaces/mutate): patched [Assigned]" in out
    assert "namespaces.enclave.dev (/namespaces): denied [TenantCordoned]" in out
    assert "tenant cli-beta: 1 namespace(s), cordoned; owners: User bob, Group cli-beta-team" in out
    skipped = next(line for line in out.splitlines() if "not called (rules do not match)" in line)
    assert "serviceaccounts.enclave.dev" in skipped
    assert "resources.mutate.enclave.dev" in skipped  # namespaced resources only: a Namespace is not one
    assert out.strip().endswith("tenant cli-beta is cordoned")


def test_explain_a_request_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = tmp_path / "request.yaml"
    request.write_text("user: cli-admin\nobject: {apiVersion: v1, kind: Namespace, metadata: {name: plain}}\n")
    code, out, _ = _run(capsys, "explain", str(POLICIES), str(request))
    assert code == 0
    assert "matches spec.administrators entry User cli-admin" in out
    assert "answer: allowed" in out
    code, _, err = _run(capsys, "explain", str(POLICIES), "no such case")
    assert code == 2
    assert "neither a file nor the name of a test case" in err


def test_completion_scripts_name_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "completion", "bash")
    assert code == 0
    assert "complete -o filenames -F _enclave enclave" in out
    for verb in ("test", "check", "explain", "completion"):
        assert verb in out
    code, out, _ = _run(capsys, "completion", "zsh")
    assert out.startswith("#compdef enclave")
    assert "__complete" not in out.split("_describe", 1)[1].split("\n", 1)[0]  # the hidden verb is not offered
    code, out, _ = _run(capsys, "completion", "fish")
    assert code == 0
    assert "complete -c enclave -n __fish_use_subcommand -a 'test check explain" in out


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_parse(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    binary = shutil.which(shell)
    if binary is None:
        pytest.skip(f"{shell} is not installed")
    code, script, _ = _run(capsys, "completion", shell)
    assert code == 0
    checked = subprocess.run([binary, "-n"], input=script, capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


def test_tenant_completion_is_silent_without_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    for argv in (["--kubeconfig", str(kubeconfig)], ["--kubeconfig", str(tmp_path / "absent")]):
        code, out, err = _run(capsys, "__complete", "tenants", *argv)
        assert (code, out, err) == (0, "", "")
    from enclave_cli.__main__ import build_parser

    assert "__complete" not in build_parser().format_help()


def test_colour_only_when_asked() -> None:
    assert Style(colour=False).red("x") == "x"
    assert Style(colour=True).red("x") == "\x1b[31mx\x1b[0m"
    assert (
        table(["A", "B"], [[Style(colour=True).green("ok"), "z"], ["longer", "y"]])
        .splitlines()[1]
        .startswith("\x1b[32mok\x1b[0m      z")
    )


def test_every_verb_has_help_with_examples(capsys: pytest.CaptureFixture[str]) -> None:
    from enclave_cli.__main__ import build_parser

    parser = build_parser()
    verbs = next(a for a in parser._actions if a.dest == "verb")
    for name, sub in verbs.choices.items():  # type: ignore[union-attr]
        assert "examples:" in (sub.epilog or ""), name


def test_an_unreadable_kubeconfig_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: [\n")
    for argv in (["tenants"], ["cordon", "acme"], ["doctor"], ["quota"], ["promote", "ns/sa"]):
        code, _, err = _run(capsys, *argv, "--kubeconfig", str(broken))
        assert code == 2, argv
        assert err.startswith("enclave: cannot load the kubeconfig:"), err
        assert err.count("\n") == 1
        assert "Traceback" not in err


def test_check_runs_the_rule_validation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tenant.yaml").write_text(
        "apiVersion: enclave.dev/v1beta2\nkind: Tenant\nmetadata: {name: t}\nspec:\n"
        "  owners: [{kind: User, name: a}]\n  rules:\n  - enforce:\n      action: deny\n      metadata:\n"
        "      - kinds: ['*']\n        labels:\n          env: {values: [{exp: '(open'}]}\n"
    )
    code, out, _ = _run(capsys, "check", str(tmp_path))
    assert code == 1
    assert (
        f"{tmp_path / 'tenant.yaml'}:12: Tenant 't': spec.rules[0].enforce.metadata[0].labels['env'].values[0].exp"
        in out
    )
    assert "invalid regular expression '(open'" in out


TRACE = Path(__file__).parent / "trace"


def _trace_lines(capsys: pytest.CaptureFixture[str], case: str) -> dict[str, str]:
    """``explain``'s per-rule lines of a case of tests/trace, by rule origin."""
    code, out, _ = _run(capsys, "explain", str(TRACE), case)
    assert code == 0
    lines = out.split("tenant rules for namespace tr-prod (evaluation order, by /resources):\n", 1)[1].splitlines()
    found = {}
    for line in lines:
        if ". " in line and " (" in line:
            origin = line.split(". ", 1)[1].split(" (", 1)[0]
            found[origin] = line.split("): ", 1)[1]
    return found


def test_the_trace_cases_pass() -> None:
    results = testing.run([TRACE])
    assert len(results) == 4
    assert all(result.passed for result in results), [r.problems for r in results]


def test_trace_every_skip_reason(capsys: pytest.CaptureFixture[str]) -> None:
    rules = _trace_lines(capsys, "the deny decides a Secret")
    assert list(rules) == [*(f"Tenant tr spec.rules[{i}]" for i in range(6)), "RuleStatus tr-prod/default spec[0]"]
    assert rules["Tenant tr spec.rules[0]"].startswith("decides: Tenant tr spec.rules[0] denies")
    assert rules["Tenant tr spec.rules[1]"].startswith(
        "skipped: namespaceSelector {'matchLabels': {'stage': 'test'}} does not select namespace tr-prod"
    )
    assert rules["Tenant tr spec.rules[2]"] == "skipped: audience [Group tr-ops] excludes alice (groups: none)"
    assert rules["Tenant tr spec.rules[3]"] == "skipped: condition 'is-special' is false"
    assert rules["Tenant tr spec.rules[4]"] == "skipped: condition 'reviewed' is false"
    assert rules["Tenant tr spec.rules[5]"] == (
        "skipped: does not govern Secret (v1) here: it governs metadata of kinds ['Deployment'] in apiGroups [apps]"
    )
    assert rules["RuleStatus tr-prod/default spec[0]"].startswith("skipped: does not govern Secret (v1)")
    _, out, _ = _run(capsys, "explain", str(TRACE), "the deny decides a Secret")
    assert "  decided by: Tenant tr spec.rules[0]" in out


def test_trace_a_condition_that_errors(capsys: pytest.CaptureFixture[str]) -> None:
    rules = _trace_lines(capsys, "a condition that errors refuses")
    assert rules["Tenant tr spec.rules[4]"].startswith("rejects: condition 'reviewed' errored: ")
    assert rules["Tenant tr spec.rules[0]"] == "applies: its constraint is not hit"


def test_trace_a_later_allow_overrides_a_deny(capsys: pytest.CaptureFixture[str]) -> None:
    rules = _trace_lines(capsys, "a later allow overrides the deny")
    assert rules["Tenant tr spec.rules[0]"].endswith("but a later rule decides the same item")
    assert rules["RuleStatus tr-prod/default spec[0]"] == "applies: satisfied"
    rules = _trace_lines(capsys, "the allow refuses a value outside its list")
    assert rules["RuleStatus tr-prod/default spec[0]"].startswith("decides: RuleStatus tr-prod/default spec[0] allows")


def test_trace_a_request_no_rule_judges(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = tmp_path / "request.yaml"
    request.write_text(
        "user: system:kube-scheduler\n"
        "object: {apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: tr-prod, labels: {env: prod}}}\n"
    )
    code, out, _ = _run(capsys, "explain", str(TRACE), str(request))
    assert code == 0
    assert "not consulted: /resources answered ControlPlane before asking any rule" in out


def test_the_trace_decides_as_admission_does() -> None:
    """The walker's verdict is /resources' own: the rules it says decide are the ones the denial names."""
    from enclave_admission.review import AdmissionRequest
    from enclave_admission.rules import validation
    from enclave_cli.trace import trace

    world = testing.load_world([TRACE])
    compiled = compile_world(world)
    for case in testing.collect_cases(world):
        state = compiled.state()
        request = case.request
        found = trace(request, request.obj, state, compiled.tenant("tr"), compiled.namespace_labels["tr-prod"])
        assert found is not None
        decision = validation.validate(AdmissionRequest.from_review(request.review(request.obj)), state)
        assert all(origin in decision.message for origin in found.decided_by), case.name
        assert bool(found.decided_by) == (not decision.allowed), case.name


def test_explain_traces_the_policy_rules(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "explain", str(POLICIES), "a tenant rule denies a label value on any kind")
    assert code == 0
    assert "resources.enclave.dev (/resources): denied [RuleViolation]" in out
    assert "tenant rules for namespace cli-acme-prod (evaluation order, by /resources):" in out
    assert "1. Tenant cli-acme spec.rules[0] (deny): decides: Tenant cli-acme spec.rules[0] denies" in out
    assert "2. Tenant cli-acme spec.rules[1] (audit): applies: its constraint is not hit" in out
    assert "where each rule is judged with spec.rules.engine native or both (here: webhook):" in out
    assert "Tenant cli-acme spec.rules[0] metadata: kube-apiserver policy: labels and annotations compile" in out


def test_usage_changes_the_pool_decisions(capsys: pytest.CaptureFixture[str]) -> None:
    """The manifest's usage is what a shrink is judged against: with nothing used, the same shrink passes."""
    case = next(c for c in CASES if c.name == "a bound claim cannot shrink below what its namespace uses")
    assert testing.run_case(case, COMPILED).outcome.result == "denied"  # type: ignore[union-attr]
    unused = COMPILED.state()
    outcome = evaluate(case.request, unused, COMPILED.namespace)
    assert outcome.result == "allowed"
    bound = unused.pools.bound_by_key["cli-acme-prod/cli-claim"]
    assert (bound.pool, bound.claims) == ("cli-pool-a", {"requests.cpu": "3"})


def test_bad_usage_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _copy_policies(tmp_path)
    (tmp_path / "extra.test.yaml").write_text(
        "kind: EnclaveTest\nmetadata: {name: bad usage}\nusage: {pools: {cli-pool-a: 3}}\ntests:\n- name: x\n"
        "  user: bob\n  object: {apiVersion: v1, kind: Namespace, metadata: {name: x}}\n  expect: allowed\n"
    )
    code, _, err = _run(capsys, "test", str(tmp_path))
    assert code == 2
    assert "extra.test.yaml:3: usage.pools maps pool -> namespace -> {resource: quantity}" in err


def test_usage_fills_the_shared_quota() -> None:
    """The shared quota's ledger holds the manifest's usage: without it, the same Pod fits."""
    case = next(c for c in CASES if c.name == "a pod beyond the shared quota is refused")
    assert testing.run_case(case, COMPILED).passed
    outcome = evaluate(case.request, COMPILED.state(), COMPILED.namespace)
    assert outcome.result == "allowed", outcome.message
    ledger = COMPILED.state(case.usage).ledgers.cached("globalresourcequota.cli-shared")  # type: ignore[union-attr]
    assert ledger is not None
    assert ledger.status is not None
    block = ledger.status.resource_quota
    assert block is not None
    assert (block.used, block.initialized) == ({"pods": "1", "requests.cpu": "500m"}, True)


def test_custom_quota_usage_and_hook_scope() -> None:
    """The generic quota hook covers exactly what the quotas count, and the ledger holds the stated usage."""
    from enclave_cli.engine import _scoped, hooks

    case = next(c for c in CASES if c.name == "a pod beyond the custom quota is refused")
    state = COMPILED.state(case.usage)
    scoped = next(h for h in _scoped(hooks(COMPILED.namespace), state) if h.path == "/quotas")
    assert [(r.api_groups, r.resources) for r in scoped.rules] == [([""], ["pods"])]
    assert evaluate(case.request, COMPILED.state(), COMPILED.namespace).result == "allowed"  # nothing used yet


def test_explain_uses_the_cases_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "explain", str(POLICIES), "a pod beyond the custom quota is refused")
    assert code == 0
    assert "quotas.enclave.dev (/quotas): denied [QuotaExceeded]" in out
    request = tmp_path / "request.yaml"
    request.write_text(
        "user: carol\nusage: {customQuotas: {cli-delta-apps/cli-pods: '1'}}\n"
        "object: {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: cli-delta-apps}}\n"
    )
    code, out, _ = _run(capsys, "explain", str(POLICIES), str(request))
    assert code == 0
    assert "answer: denied by quotas.enclave.dev: CustomQuota cli-delta-apps/cli-pods exceeded" in out
