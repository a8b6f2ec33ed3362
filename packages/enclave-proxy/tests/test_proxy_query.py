"""Label and field selectors as kube-apiserver reads them (``labels.Parse``, ``fields.ParseSelector``)."""

from __future__ import annotations

import time

import pytest

from enclave_proxy.query import (
    MAX_SELECTOR,
    NAMESPACE_FIELDS,
    SelectorError,
    parse_fields,
    parse_labels,
    selection,
)


def ns(name: str, labels: dict[str, str] | None = None, phase: str = "Active") -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels or {}}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("", {}, True),
        ("team=a", {"team": "a"}, True),
        ("team==a", {"team": "b"}, False),
        ("team!=a", {}, True),
        ("team!=a", {"team": "a"}, False),
        ("team in (a, b)", {"team": "b"}, True),
        ("team in (a,b)", {}, False),
        ("team notin (a,b)", {}, True),
        ("team notin (a,b)", {"team": "a"}, False),
        ("team", {"team": ""}, True),
        ("!team", {"team": ""}, False),
        ("!team", {}, True),
        ("size>3", {"size": "4"}, True),
        ("size<3", {"size": "4"}, False),
        ("size>3", {"size": "x"}, False),
        ("team=a,env in (prod),!legacy", {"team": "a", "env": "prod"}, True),
        ("team=a,env in (prod),!legacy", {"team": "a", "env": "prod", "legacy": "y"}, False),
    ],
)
def test_label_selectors_match_as_kube_apiserver(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert selection({"labelSelector": selector}, NAMESPACE_FIELDS).matches(ns("x", labels)) is expected


@pytest.mark.parametrize("selector", ["a in (b", "a in b)", "=a", "a b", "a in ((b))", "a>b", "a, ,b", "a in (b) c"])
def test_bad_label_selectors_are_refused(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_labels(selector)


def test_field_selectors_on_namespaces() -> None:
    fields = selection({"fieldSelector": "metadata.name=a,status.phase!=Terminating"}, NAMESPACE_FIELDS)
    assert fields.matches(ns("a"))
    assert not fields.matches(ns("b"))
    assert not fields.matches(ns("a", phase="Terminating"))


def test_unsupported_field_is_refused_in_kube_apiservers_words() -> None:
    with pytest.raises(SelectorError, match=r"field label not supported: spec\.finalizers"):
        parse_fields("spec.finalizers=x", NAMESPACE_FIELDS)


def test_worst_case_selector_is_refused_or_parsed_in_linear_time() -> None:
    with pytest.raises(SelectorError):
        parse_labels("a" * (MAX_SELECTOR + 1))
    longest = ",".join(["k in (" + ",".join(["v"] * 50) + ")"] * 30)[:MAX_SELECTOR].rsplit(",k", 1)[0]
    started = time.perf_counter()
    parse_labels(longest)
    with pytest.raises(SelectorError):
        parse_labels("a in (" + "(" * 4000)
    assert time.perf_counter() - started < 0.5
