"""Which CEL functions kube-apiserver offers a new ValidatingAdmissionPolicy, minor by minor, and the minor a
cluster serves.

kube-apiserver checks the expressions of a policy it is asked to create or change in the CEL environment of its
*compatibility version*, one minor below its own (``k8s.io/apiserver/pkg/cel/environment``:
``DefaultCompatibilityVersion``; each library of ``base.go`` has an ``IntroducedVersion``): a library introduced
in release M is usable from kube-apiserver M+1 on, and a policy calling something the environment lacks is
refused when it is written (HTTP 422), so enforcing nothing. The table below is ``base.go`` of k8s.io/apiserver
v0.35.4 to v0.37.2 (identical for what a policy can call, but Kubernetes' lists library v1, ``includes``, from
1.37's environment). The compiler asks it for every CEL text it writes (:func:`unavailable`), with the minor the
cluster serves (:func:`served`, from ``/version``; never assumed), and keeps on the webhook what the served
kube-apiserver would refuse: a rule whose own conditions or audience call such a function, or, for the
functions the compiler itself writes, every rule (on a kube-apiserver older than Enclave supports).

A function not in the table is not offered: Enclave's CEL engine knows libraries kube-apiserver's environment
does not have (``math``, ``base64``, ``cel.bind``, strings ``reverse``...), and a rule calling one judges alike
only on the webhook. Names are read off the text (receiver calls by their method name), so ``reverse`` of a
string reads as the lists library's; kube-apiserver then refuses the policy and the controller reports it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

Minor = tuple[int, int]

NEWEST: Final[Minor] = (1, 37)
"""The newest minor Enclave supports (docs/versions.md): what ``enclave test`` compiles for, having no cluster."""

_LIBRARIES: Final[tuple[tuple[Minor, str, Sequence[str]], ...]] = (
    (
        (1, 0),
        "the CEL standard library, Kubernetes' URL, regex and list libraries and the strings extension",
        [
            "size",
            "matches",
            "contains",
            "startsWith",
            "endsWith",
            "int",
            "uint",
            "double",
            "string",
            "bytes",
            "bool",
            "dyn",
            "type",
            "duration",
            "timestamp",
            "getDate",
            "getDayOfMonth",
            "getDayOfWeek",
            "getDayOfYear",
            "getFullYear",
            "getHours",
            "getMilliseconds",
            "getMinutes",
            "getMonth",
            "getSeconds",
            "has",
            "all",
            "exists",
            "exists_one",
            "map",
            "filter",
            "url",
            "isURL",
            "getScheme",
            "getHost",
            "getHostname",
            "getPort",
            "getEscapedPath",
            "getQuery",
            "find",
            "findAll",
            "isSorted",
            "sum",
            "min",
            "max",
            "indexOf",
            "lastIndexOf",
            "charAt",
            "lowerAscii",
            "upperAscii",
            "replace",
            "split",
            "substring",
            "trim",
        ],
    ),
    (
        (1, 27),
        "the authorizer library",
        [
            "path",
            "group",
            "resource",
            "subresource",
            "namespace",
            "name",
            "check",
            "allowed",
            "reason",
            "errored",
            "error",
            "serviceAccount",
        ],
    ),
    (
        (1, 28),
        "optional types and the quantity library",
        [
            "optional.of",
            "optional.ofNonZeroValue",
            "optional.none",
            "hasValue",
            "value",
            "orValue",
            "or",
            "quantity",
            "isQuantity",
            "sign",
            "isInteger",
            "asInteger",
            "asApproximateFloat",
            "add",
            "sub",
            "compareTo",
            "isGreaterThan",
            "isLessThan",
        ],
    ),
    ((1, 29), "the strings extension v2", ("format", "strings.quote", "join")),
    ((1, 29), "the sets extension", ("sets.contains", "sets.equivalent", "sets.intersects")),
    (
        (1, 30),
        "the IP and CIDR libraries",
        [
            "ip",
            "isIP",
            "ip.isCanonical",
            "family",
            "isUnspecified",
            "isLoopback",
            "isLinkLocalMulticast",
            "isLinkLocalUnicast",
            "isGlobalUnicast",
            "cidr",
            "isCIDR",
            "containsIP",
            "containsCIDR",
            "masked",
            "prefixLength",
        ],
    ),
    (
        (1, 31),
        "the format library and authorizer selectors",
        ("format.*", "validate", "fieldSelector", "labelSelector"),
    ),
    ((1, 32), "two-variable comprehensions", ("transformList", "transformMap", "transformMapEntry", "existsOne")),
    ((1, 33), "the semver library", ("semver", "isSemver", "major", "minor", "patch")),
    (
        (1, 34),
        "the lists extension v3",
        ("slice", "flatten", "sort", "sortBy", "lists.range", "reverse", "distinct", "first", "last"),
    ),
    ((1, 37), "Kubernetes' lists library v1", ("includes",)),
)

INTRODUCED: Final[Mapping[str, tuple[Minor, str]]] = {
    name: (minor, library) for minor, library, names in reversed(_LIBRARIES) for name in names
}
"""Function (or macro) name -> the release whose CEL environment introduced it, and its library (the earliest
wins where two libraries declare one name, ``compareTo`` of quantities and of semvers)."""

_NAMESPACES: Final = frozenset({"optional", "ip", "math", "strings", "base64", "sets", "lists", "format", "cel"})
_CALL: Final = re.compile(r"(?:\b([A-Za-z_]\w*)\.)?([A-Za-z_]\w*)\s*\(")
_QUOTES: Final = ('"""', "'''", '"', "'")
_REST: Final = {
    (quote, raw): re.compile((r"[\s\S]*?" if raw else r"(?:[^\\]|\\[\s\S])*?") + re.escape(quote))
    for quote in _QUOTES
    for raw in (False, True)
}
"""The rest of a string literal after its opening quote, through its closing one (raw: no escapes). Each
character is read one way only (a backslash only as an escape), so a match is linear in the text even when
the literal never closes."""
_OPENING: Final = re.compile(r"['\"]")


def literal_end(expression: str, at: int) -> int:
    """Where the string literal opening at ``at`` ends (raw strings take no escapes); the end of the text when it
    does not close."""
    raw = at > 0 and expression[at - 1] in "rR"
    quote = next(q for q in _QUOTES if expression.startswith(q, at))
    rest = _REST[(quote, raw)].match(expression, at + len(quote))
    return rest.end() if rest else len(expression)


def calls(text: str) -> set[str]:
    """The functions and macros ``text`` calls outside its string literals (``optional.none`` style for
    namespaced ones, the method's name for a receiver call). Regular expressions do the scanning: a namespace's
    compiled policy runs to hundreds of kilobytes."""
    bare, at = [], 0
    while (opening := _OPENING.search(text, at)) is not None:
        bare.append(text[at : opening.start()])
        at = literal_end(text, opening.start())
        bare.append(" ")
    bare.append(text[at:])
    return {
        f"{prefix}.{name}" if prefix in _NAMESPACES else name
        for prefix, name in _CALL.findall("".join(bare))
        if name != "in"  # the operator, before a parenthesis
    }


def offered_from(function: str) -> Minor | None:
    """The first kube-apiserver minor that takes ``function`` in a new policy expression; None: no minor does."""
    found = INTRODUCED.get(function) or INTRODUCED.get(function.split(".", 1)[0] + ".*")
    if found is None:
        return None
    (major, minor), _ = found
    return major, minor + 1


def unavailable(texts: Iterable[str], served: Minor) -> list[str]:
    """Why kube-apiserver ``served`` would refuse a policy holding ``texts``: one line per function it does not
    offer there, sorted; empty when it takes every one."""
    found: set[str] = set()
    for text in texts:
        found |= calls(text)
    why = []
    for function in sorted(found):
        first = offered_from(function)
        if first is None:
            why.append(f"{function}() is not in kube-apiserver's CEL environment for policies")
        elif first > served:
            library = (INTRODUCED.get(function) or INTRODUCED[function.split(".", 1)[0] + ".*"])[1]
            why.append(
                f"{function}() ({library}) is offered to new policy expressions from Kubernetes "
                f"{first[0]}.{first[1]}, and kube-apiserver serves {served[0]}.{served[1]}"
            )
    return why


def served(version: Mapping[str, Any]) -> Minor:
    """The minor of kube-apiserver's ``/version`` answer (``minor`` may carry a vendor's ``+``); ValueError when
    it names none."""
    for major, minor in ((version.get("major"), version.get("minor")), _from_git(version.get("gitVersion"))):
        digits = re.match(r"\d+", str(minor or ""))
        if str(major or "").isdigit() and digits:
            return int(str(major)), int(digits.group())
    raise ValueError(f"no Kubernetes minor in /version: {dict(version)!r}")


def _from_git(git_version: object) -> tuple[str, str]:
    found = re.match(r"v?(\d+)\.(\d+)", str(git_version or ""))
    return (found.group(1), found.group(2)) if found else ("", "")
