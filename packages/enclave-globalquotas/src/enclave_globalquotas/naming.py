"""Names of the objects enclave-globalquotas writes, deterministic so every replica agrees (the label and
annotation keys it writes are in :mod:`enclave_core.api.names`).

A ResourceQuota provisioned for GlobalResourceQuota ``q`` is ``globalquota-<q>`` in each selected namespace,
and a tenant rule quota becomes the
GlobalResourceQuota ``<tenant>-rule<index>-<entry>``. A name that would pass the 253-character limit (or a
label value past 63) is cut and given a short hash of the full name, so two long names never collide.
"""

from __future__ import annotations

import hashlib
from typing import Final

MAX_NAME: Final = 253
MAX_LABEL: Final = 63


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:10]


def _bounded(readable: str, limit: int, identity: str) -> str:
    if len(readable) <= limit:
        return readable
    suffix = "-" + _digest(identity)
    return readable[: limit - len(suffix)].rstrip("-.") + suffix


def resource_quota_name(quota: str) -> str:
    """The ResourceQuota provisioned for ``quota`` in each selected namespace."""
    return _bounded(f"globalquota-{quota}", MAX_NAME, quota)


def label_value(quota: str) -> str:
    """``quota`` as a label value (names may be 253 characters, label values 63)."""
    return _bounded(quota, MAX_LABEL, quota)


def rule_status_quota_name(namespace: str, rule: int, entry: str) -> str:
    """The GlobalResourceQuota of entry ``entry`` of ``spec[rule]`` of namespace ``namespace``'s RuleStatus.
    It ends in ``.<hash>`` (a tenant rule quota's name never does: entries hold no dot), so the two kinds of name
    never collide whatever the tenant and namespace are called."""
    identity = f"{namespace}\x00{rule}\x00{entry}"
    return _bounded(f"rulestatus.{namespace}.rule{rule}.{entry}", MAX_NAME - 11, identity) + "." + _digest(identity)


def rule_quota_name(tenant: str, rule: int, entry: str) -> str:
    """The GlobalResourceQuota of entry ``entry`` of rule number ``rule`` (from 0) of ``tenant``."""
    return _bounded(f"{tenant}-rule{rule}-{entry}", MAX_NAME, f"{tenant}\x00{rule}\x00{entry}")
