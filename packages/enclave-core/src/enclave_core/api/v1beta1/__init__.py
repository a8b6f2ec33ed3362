"""The ``enclave.dev/v1beta1`` API: the older shape users migrate from, still served and converted.

Every kind is served in both versions; ``v1beta2`` is the storage version and the one controllers read.
Only two kinds have a different shape here (:mod:`.tenancy` and :mod:`.configuration`: the layouts the
spec names as older or deprecated); the other ten are identical to ``v1beta2`` but for ``apiVersion``
(:data:`IDENTICAL`). :mod:`enclave_core.api.conversion` converts between the two; docs/versions.md has the
field mapping table.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from pydantic import BaseModel

from enclave_core.api.meta import KubeObject
from enclave_core.api.v1beta1.configuration import (
    ServiceConfigurationSpecV1beta1,
    ServiceConfigurationV1beta1,
)
from enclave_core.api.v1beta1.meta import API_VERSION, GROUP_VERSION, KubeObjectV1beta1
from enclave_core.api.v1beta1.tenancy import NamespacesMetadata, TenantSpecV1beta1, TenantV1beta1

__all__ = [
    "API_VERSION",
    "COLUMN_PATHS",
    "GROUP_VERSION",
    "IDENTICAL",
    "MODELS",
    "KubeObjectV1beta1",
    "NamespacesMetadata",
    "ServiceConfigurationSpecV1beta1",
    "ServiceConfigurationV1beta1",
    "TenantSpecV1beta1",
    "TenantV1beta1",
    "model_for",
    "validate",
]

MODELS: Final[Mapping[str, type[KubeObjectV1beta1]]] = MappingProxyType(
    {"ServiceConfiguration": ServiceConfigurationV1beta1, "Tenant": TenantV1beta1}
)
"""Kinds whose v1beta1 shape differs from v1beta2, to their v1beta1 model."""


COLUMN_PATHS: Final[Mapping[str, Mapping[str, str]]] = MappingProxyType(
    {"Tenant": {".spec.namespaceOptions.quota": ".spec.namespaceQuota"}}
)
"""Printer columns whose v1beta2 JSONPath is elsewhere in v1beta1."""


def _identical() -> frozenset[str]:
    from enclave_core.api import KINDS

    return frozenset(info.kind for info in KINDS if info.kind not in MODELS)


IDENTICAL: Final[frozenset[str]] = _identical()
"""Kinds whose v1beta1 and v1beta2 shapes are the same (conversion changes ``apiVersion`` only)."""


def model_for(kind: str) -> type[KubeObjectV1beta1] | type[KubeObject]:
    """The model that describes ``kind`` in v1beta1 (the v1beta2 model for the identical kinds)."""
    if kind in MODELS:
        return MODELS[kind]
    from enclave_core.api import kind_info

    return kind_info(kind).model


def validate(obj: Mapping[str, Any]) -> BaseModel:
    """Validate a v1beta1 object against its v1beta1 shape (an identical kind against its v1beta2 model)."""
    kind = str(obj.get("kind"))
    if kind in MODELS:
        return MODELS[kind].model_validate(obj)
    if obj.get("apiVersion") != GROUP_VERSION:
        raise ValueError(f"apiVersion: {obj.get('apiVersion')!r} is not {GROUP_VERSION}")
    from enclave_core import GROUP_VERSION as HUB

    return model_for(kind).model_validate({**obj, "apiVersion": HUB})
