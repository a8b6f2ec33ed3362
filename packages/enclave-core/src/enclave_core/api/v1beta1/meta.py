"""The v1beta1 envelope: like :class:`enclave_core.api.meta.KubeObject`, with ``apiVersion: enclave.dev/v1beta1``."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field

from enclave_core import API_GROUP
from enclave_core.api.meta import ApiModel, ObjectMeta

__all__ = ["API_VERSION", "GROUP_VERSION", "KubeObjectV1beta1"]

API_VERSION: Final = "v1beta1"
GROUP_VERSION: Final = f"{API_GROUP}/{API_VERSION}"


class KubeObjectV1beta1(ApiModel):
    """``apiVersion``/``kind``/``metadata`` of a v1beta1 object; subclasses add ``spec`` and ``status``."""

    api_version: Literal["enclave.dev/v1beta1"] = "enclave.dev/v1beta1"
    """Always `enclave.dev/v1beta1`."""
    kind: str
    """The kind name."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
    spec: Any
    status: Any = None
