"""The linear-time pattern wrapper: the backtracking worst case finishes fast, RE2's refusals are named, and
the matching modes mean what Python's ``re`` says they mean."""

from __future__ import annotations

import re
import time

import pytest

from enclave_core import patterns
from enclave_core.api.tenancy import TenantSpec
from enclave_core.api.validation import tenant_problems
from enclave_core.cel import k8s_library
from enclave_core.patterns import PatternError, compile_pattern

PATHOLOGICAL = r"([a-z0-9]+-?)+\.example\.com"
"""A plausible hostname pattern: nested quantifiers make ``re`` backtrack exponentially on a near miss."""


def _near_miss(length: int) -> str:
    return "a" * length + ".example.org"


def test_pathological_pattern_on_a_long_input_is_linear() -> None:
    pattern = compile_pattern(PATHOLOGICAL)
    started = time.process_time()  # CPU time: a loaded host does not inflate it
    for length in (24, 34, 100, 10_000):
        assert not pattern.fullmatch(_near_miss(length))
        assert not pattern.search(_near_miss(length))
    assert pattern.fullmatch("team-a-app.example.com")
    elapsed = time.process_time() - started
    assert elapsed < 0.5, f"{elapsed:.3f} s: the pattern engine backtracks"


def test_cel_find_runs_on_the_linear_time_engine() -> None:
    started = time.process_time()  # CPU time: a loaded host does not inflate it
    assert k8s_library.regex_find(_near_miss(10_000), r"^([a-z0-9]+-?)+\.example\.com$") == ""
    assert k8s_library.regex_find_all("x" * 5000 + "!", r"(x+x+)+y") == []
    assert time.process_time() - started < 0.5


@pytest.mark.parametrize(
    ("pattern", "hint"),
    [
        (r"(a)\1", "backreferences"),
        (r"foo(?=bar)", "lookahead"),
        (r"foo(?!bar)", "negative lookahead"),
        (r"(?<=a)b", "lookbehind"),
        (r"(?<!a)b", "negative lookbehind"),
        (r"a++", "possessive"),
        (r"abc\Z", r"\z"),
        (r"((a{100}){100}){100}", "at most 1000"),
        (r"\pL{1000}" * 5, "needs more than"),
        ("(", "missing"),
    ],
)
def test_patterns_re2_cannot_run_are_refused_with_the_reason(pattern: str, hint: str) -> None:
    with pytest.raises(PatternError) as caught:
        compile_pattern(pattern)
    assert hint in str(caught.value)
    assert patterns.problem(pattern) == str(caught.value)


def test_an_overlong_pattern_is_refused() -> None:
    assert "longer than" in patterns.problem("a" * (patterns.MAX_PATTERN_LENGTH + 1))


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        (r"^secret-", "secret-x"),
        (r"^secret-", "a-secret-x"),
        (r".*\.k8s\.io/", "node.k8s.io/x"),
        (r"^(kube|enclave)-.*$", "kube-system"),
        (r"^(kube|enclave)-.*$", "default"),
        (r"(?i)PROD", "my-prod-ns"),
        (r"docker\.io/library/", "docker.io/library/nginx:1"),
        (r"docker\.io/library/", "ghcr.io/docker.io/library/x"),
        (r"a|ab", "ab"),
        (r"[a-z]+", "abc123"),
        (r"", "anything"),
    ],
)
def test_modes_agree_with_python_re_on_ordinary_patterns(pattern: str, text: str) -> None:
    compiled = compile_pattern(pattern)
    assert compiled.fullmatch(text) == (re.fullmatch(pattern, text) is not None)
    assert compiled.match(text) == (re.match(pattern, text) is not None)
    assert compiled.search(text) == (re.search(pattern, text) is not None)
    found = re.search(pattern, text)
    assert compiled.find(text) == (found.group(0) if found else None)
    assert compiled.find_all(text) == [m.group(0) for m in re.finditer(pattern, text)]


def test_non_ascii_text_and_lone_surrogates_do_not_raise() -> None:
    compiled = compile_pattern("é+")
    assert compiled.find("caféé!") == "éé"
    assert compiled.find_all("é-é") == ["é", "é"]
    assert not compiled.search("\ud800 lone surrogate")
    assert compile_pattern(".*").fullmatch("\ud800")


def test_tenant_denied_regex_that_re2_refuses_is_named() -> None:
    spec = TenantSpec.model_validate(
        {
            "owners": [{"kind": "User", "name": "alice"}],
            "namespaceOptions": {
                "forbiddenLabels": {"deniedRegex": r"(a)\1"},
                "forbiddenAnnotations": {"deniedRegex": "^ok-"},
            },
        }
    )
    problems = tenant_problems(spec)
    assert [p.field for p in problems] == ["spec.namespaceOptions.forbiddenLabels.deniedRegex"]
    assert "backreferences" in problems[0].message
