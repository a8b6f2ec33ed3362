"""Declarations of what an expression may see: variable names and types, and the result it must yield.

An :class:`Environment` is a frozen value so that it can be part of the compile cache key: the
same text compiled against two declarations (``now`` declared or not) are two programs.
The call sites of the specification each get a ready-made declaration below.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "MATCH_CONDITION_ENV",
    "POLICY_CONDITION_ENV",
    "QUOTA_SELECTOR_ENV",
    "QUOTA_SOURCE_ENV",
    "RULE_AUDIENCE_ENV",
    "RULE_CONDITION_ENV",
    "Environment",
    "ResultType",
    "VarType",
]


class VarType(enum.Enum):
    """CEL types a variable can be declared with; Kubernetes objects are ``DYN`` (schemaless)."""

    DYN = "dyn"
    BOOL = "bool"
    INT = "int"
    UINT = "uint"
    DOUBLE = "double"
    STRING = "string"
    BYTES = "bytes"
    TIMESTAMP = "timestamp"
    DURATION = "duration"


class ResultType(enum.Enum):
    """What the caller needs the expression to produce; anything else is an error result."""

    ANY = "any"
    BOOL = "bool"
    QUANTITY = "quantity"
    QUANTITIES = "quantities"
    """A quantity or a list of quantities (CustomQuota ``sources[].cel``); always returned as a list."""


@dataclass(frozen=True, slots=True)
class Environment:
    """A named set of variable declarations, hashable so it can key the compile cache."""

    name: str
    variables: tuple[tuple[str, VarType], ...]

    @classmethod
    def of(cls, name: str, **variables: VarType) -> Environment:
        """Build a declaration; keyword order does not matter for caching (names are sorted)."""
        return cls(name, tuple(sorted(variables.items())))

    def extended(self, name: str, **variables: VarType) -> Environment:
        """This declaration plus (or overriding) some variables, for call sites that add their own."""
        merged = dict(self.variables)
        merged.update(variables)
        return Environment.of(name, **merged)

    @property
    def names(self) -> frozenset[str]:
        """The declared variable names."""
        return frozenset(name for name, _ in self.variables)


RULE_CONDITION_ENV = Environment.of(
    "rule-condition",
    object=VarType.DYN,
    oldObject=VarType.DYN,
    request=VarType.DYN,
    now=VarType.TIMESTAMP,
)
"""RuleStatus ``enforce.conditions``: evaluated on an admission request."""

RULE_AUDIENCE_ENV = Environment.of("rule-audience", request=VarType.DYN)
"""RuleStatus ``audience[]`` entries of kind ``Custom``: a boolean over ``request`` (``request.userInfo``)."""

QUOTA_SOURCE_ENV = Environment.of("quota-source", object=VarType.DYN)
"""CustomQuota ``sources[].cel``: must yield a quantity or a list of quantities."""

QUOTA_SELECTOR_ENV = Environment.of("quota-selector", object=VarType.DYN)
"""CustomQuota ``selectors[].celExpressions``: booleans over the counted object."""

POLICY_CONDITION_ENV = Environment.of("policy-condition", object=VarType.DYN, now=VarType.TIMESTAMP)
"""GlobalTenantResource ``policy.condition``: ``object`` is the destination object or null."""

MATCH_CONDITION_ENV = Environment.of(
    "match-condition",
    object=VarType.DYN,
    oldObject=VarType.DYN,
    request=VarType.DYN,
    authorizer=VarType.DYN,
)
"""Webhook ``matchConditions``: evaluated by kube-apiserver; Enclave only checks that they compile.

``authorizer`` is declared as ``dyn`` so references to it compile; its methods (``group()``,
``check()``...) are not modelled, see the decision record.
"""
