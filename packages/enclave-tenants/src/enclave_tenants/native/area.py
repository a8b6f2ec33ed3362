"""What an area module of the native-rules compiler is given and gives back.

:mod:`enclave_tenants.native.compiler` keeps the namespace-wide work (each rule's applicability variable, the
metadata chains, the checks and placements of the rest, the order of the areas); an area compiled in a module of
its own (:mod:`~enclave_tenants.native.services`, :mod:`~enclave_tenants.native.workloads`,
:mod:`~enclave_tenants.native.ingress`, :mod:`~enclave_tenants.native.network`) takes the namespace's rules in
order as :class:`Rule` (None for a rule whose applicability did not compile: it is on the webhook) and returns an
:class:`Area` the compiler folds into the program.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

JSON = dict[str, Any]
Path = Literal["native", "webhook"]


@dataclass(frozen=True)
class Rule:
    """A rule whose applicability compiled: ``variable`` is the CEL (``variables.a<index>``) saying it applies."""

    index: int
    origin: str
    action: str
    variable: str


@dataclass
class Area:
    """One area's part of a namespace's program."""

    placements: list[tuple[str, Path, str]] = field(default_factory=list)
    """(rule origin, path, why) for every rule that speaks about the area."""
    variables: list[JSON] = field(default_factory=list)
    validations: list[JSON] = field(default_factory=list)
    audit_validations: list[JSON] = field(default_factory=list)
    resources: set[str] = field(default_factory=set)
    """``resource.group`` names the policy must match (``resource`` for the core group)."""
    asked: dict[int, str] = field(default_factory=dict)
    """Rule index -> CEL true when the webhook asks whether the rule applies (its conditions are evaluated)."""

    def refuse_listed(self, name: str, listed: str) -> None:
        """A variable ``name`` holding ``listed`` (CEL: the webhook's refusals of this request, a list) and the
        validation asking it to be empty, whose message is all of them as the webhook joins them."""
        self.variables.append({"name": name, "expression": listed})
        self.validations.append(
            {
                "expression": f"size(variables.{name}) == 0",
                "messageExpression": f"variables.{name}.join('; ')",
                "reason": "Forbidden",
            }
        )

    def audit_listed(self, applies: str, listed: str) -> None:
        """An audit rule's report: ``listed`` (CEL: its messages, a list) when ``applies``, as a warning."""
        self.audit_validations.append(
            {"expression": f"!({applies}) || size({listed}) == 0", "messageExpression": f"{listed}.join('; ')"}
        )
