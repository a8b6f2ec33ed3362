"""Tenant and TenantOwner status, computed from the plan (pure: the caller passes the clock).

Conditions keep their ``lastTransitionTime`` while their status holds (``set_condition``), so a status is
written only when something a reader cares about changed, never on every reconcile.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from enclave_core.api.meta import Entity
from enclave_core.api.tenancy import TenantOwnerStatus, TenantStatus
from enclave_core.conditions import Condition, ConditionStatus, new_condition, read_conditions, set_condition
from enclave_tenants.owners import Owner

JSON = dict[str, Any]
CONDITION_MESSAGE_LIMIT = 32000


class Problem(BaseModel):
    """Something wrong with an object, as a condition reason and a message that says what to fix."""

    model_config = ConfigDict(frozen=True)

    reason: str
    message: str


def _previous(raw: JSON) -> list[Condition]:
    return read_conditions(raw)


def _ready(problems: Sequence[Problem], ok_message: str, generation: int, now: datetime) -> Condition:
    if not problems:
        return new_condition("Ready", "True", "Active", ok_message, now=now, observed_generation=generation)
    message = "; ".join(p.message for p in problems)[:CONDITION_MESSAGE_LIMIT]
    return new_condition("Ready", "False", problems[0].reason, message, now=now, observed_generation=generation)


def tenant_status(
    raw: JSON,
    *,
    namespaces: Sequence[str],
    owners: Sequence[Owner],
    cordoned: bool,
    problems: Sequence[Problem],
    now: datetime,
    unlisted: Sequence[Entity] = (),
) -> JSON:
    """The Tenant's ``status``: size, sorted namespaces, effective owners, the owners outside the effective
    users (always written, empty too: a merge patch leaves out a key it does not name), Ready and Cordoned."""
    generation = int(raw.get("metadata", {}).get("generation") or 0)
    names = sorted(namespaces)
    ready = _ready(problems, f"{len(names)} namespaces, {len(owners)} owners", generation, now)
    cordon_status: ConditionStatus = "True" if cordoned else "False"
    cordon = new_condition(
        "Cordoned",
        cordon_status,
        "Cordoned" if cordoned else "NotCordoned",
        "no namespaces may be created or deleted (spec.cordoned)" if cordoned else "",
        now=now,
        observed_generation=generation,
    )
    conditions = set_condition(set_condition(_previous(raw), ready), cordon)
    status = TenantStatus(
        size=len(names),
        namespaces=names,
        owners=[owner.status() for owner in owners],
        unlisted_owners=list(unlisted),
        conditions=conditions,
        observed_generation=generation,
    )
    return status.to_k8s()


def owner_status(raw: JSON, *, tenants: Sequence[str], problems: Sequence[Problem], now: datetime) -> JSON:
    """The TenantOwner's ``status``: the sorted tenants it owns and Ready."""
    generation = int(raw.get("metadata", {}).get("generation") or 0)
    names = sorted(tenants)
    ready = _ready(problems, f"owner of {len(names)} tenants", generation, now)
    status = TenantOwnerStatus(
        tenants=names, conditions=set_condition(_previous(raw), ready), observed_generation=generation
    )
    return status.to_k8s()


def changed(raw: JSON, status: JSON) -> bool:
    """Whether writing ``status`` would change the stored one (only the fields we write are compared)."""
    old = raw.get("status") or {}
    return any(old.get(key) != value for key, value in status.items())
