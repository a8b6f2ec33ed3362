"""The marks replication leaves on the objects it manages, and how a replication object is named in them
(the keys themselves are in :mod:`enclave_core.api.names`).

Every replicated object carries the label ``enclave.dev/managed-by=enclave-replication`` (what the
controller's informers and admission's protection hook select on) and three annotations: which
(Global)TenantResource manages it, whether that resource created it (``"true"``) or adopted it (``"false"``),
and a hash of what was last applied (so a changed manifest is noticed without comparing every field).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final, Literal

import orjson

from enclave_core.api.names import (
    REPLICATION_CREATED_ANNOTATION,
    REPLICATION_HASH_ANNOTATION,
    REPLICATION_MANAGER,
    REPLICATION_OWNER_ANNOTATION,
)
from enclave_core.kube.rest import JSON

LIFECYCLE_ANNOTATIONS: Final = (
    REPLICATION_OWNER_ANNOTATION,
    REPLICATION_CREATED_ANNOTATION,
    REPLICATION_HASH_ANNOTATION,
)
"""What replication writes on an object besides its manifest: dropped from a source, removed on release."""

OwnerKind = Literal["GlobalTenantResource", "TenantResource"]


@dataclass(frozen=True, order=True)
class Owner:
    """A GlobalTenantResource (no namespace) or a TenantResource (namespaced)."""

    kind: OwnerKind
    name: str
    namespace: str = ""

    @property
    def key(self) -> str:
        """``GlobalTenantResource/<name>`` or ``TenantResource/<namespace>/<name>``: the owner annotation."""
        if self.namespace:
            return f"{self.kind}/{self.namespace}/{self.name}"
        return f"{self.kind}/{self.name}"

    @property
    def field_manager(self) -> str:
        """One server-side-apply field manager per replication object (at most 128 characters), so two
        resources writing the same object conflict visibly instead of silently taking turns."""
        short = "gtr" if self.kind == "GlobalTenantResource" else "tr"
        ident = f"{self.namespace}.{self.name}" if self.namespace else self.name
        manager = f"{REPLICATION_MANAGER}/{short}/{ident}"
        if len(manager) <= 128:
            return manager
        digest = hashlib.sha256(ident.encode()).hexdigest()[:10]
        return f"{manager[:117]}-{digest}"

    @classmethod
    def parse(cls, key: str) -> Owner | None:
        parts = key.split("/")
        if len(parts) == 2 and parts[0] == "GlobalTenantResource":
            return cls("GlobalTenantResource", parts[1])
        if len(parts) == 3 and parts[0] == "TenantResource":
            return cls("TenantResource", parts[2], parts[1])
        return None


def content_hash(manifest: JSON) -> str:
    """A short stable hash of a manifest (keys sorted)."""
    return hashlib.sha256(orjson.dumps(manifest, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` -> (``apps``, ``v1``); ``v1`` -> (``""``, ``v1``)."""
    group, _, version = api_version.rpartition("/")
    return group, version
