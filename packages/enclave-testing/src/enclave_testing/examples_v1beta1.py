"""One valid v1beta1 example object per kind (plain dicts), using the deprecated layouts where v1beta1 has them.

The Tenant and the ServiceConfiguration are written the way a v1beta1 user writes them (``namespaceQuota``,
``namespacesMetadata``, ``userGroups``...); the identical kinds are the v1beta2 examples with the older
``apiVersion``. Unit tests round-trip them; integration tests create them through kube-apiserver.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from enclave_core.api.v1beta1.meta import GROUP_VERSION
from enclave_testing.examples import EXAMPLES

__all__ = ["EXAMPLES_V1BETA1", "example_v1beta1"]

_DIFFERENT: Final[dict[str, dict[str, Any]]] = {
    "Tenant": {
        "apiVersion": GROUP_VERSION,
        "kind": "Tenant",
        "metadata": {"name": "lunar", "labels": {"env": "prod"}},
        "spec": {
            "owners": [
                {"kind": "User", "name": "alice"},
                {"kind": "Group", "name": "lunar-admins", "clusterRoles": ["admin"]},
            ],
            "permissions": {"matchOwners": [{"matchLabels": {"team": "lunar"}}]},
            "namespaceQuota": 3,
            "namespacesMetadata": {
                "additionalLabels": {"tenant-tier": "gold"},
                "additionalAnnotations": {"contact": "lunar@example.com"},
            },
            "forbiddenNamespaceLabels": {"denied": ["forbidden"], "deniedRegex": "^secret-"},
            "forbiddenNamespaceAnnotations": {"denied": ["nope"]},
            "nodeSelector": {"pool": "lunar"},
            "forceTenantPrefix": False,
            "cordoned": False,
            "preventDeletion": True,
            "additionalRoleBindings": [
                {
                    "clusterRoleName": "view",
                    "subjects": [{"kind": "Group", "name": "auditors", "apiGroup": "rbac.authorization.k8s.io"}],
                }
            ],
            "data": {"region": "eu", "nested": {"list": [1, "two"]}},
        },
    },
    "ServiceConfiguration": {
        "apiVersion": GROUP_VERSION,
        "kind": "ServiceConfiguration",
        "metadata": {"name": "default"},
        "spec": {
            "cacheInvalidation": "12h30m",
            "enableTLSReconciler": True,
            "rbac": {"deleter": "custom-deleter"},
            "administrators": [{"kind": "User", "name": "alice"}],
            "allowServiceAccountPromotion": True,
            "events": {"namespace": "enclave-system"},
            "forceTenantPrefix": True,
            "ignoreUserWithGroups": ["system:masters"],
            "overrides": {
                "TLSSecretName": "enclave-tls-custom",
                "mutatingWebhookConfigurationName": "legacy-mutating",
                "validatingWebhookConfigurationName": "legacy-validating",
            },
            "protectedNamespaceRegex": "^(kube|enclave)-.*$",
            "userGroups": ["enclave.dev", "platform"],
            "userNames": ["bob", "system:serviceaccount:ci:deployer"],
        },
    },
}

EXAMPLES_V1BETA1: Final[dict[str, dict[str, Any]]] = {
    kind: _DIFFERENT.get(kind) or {**copy.deepcopy(obj), "apiVersion": GROUP_VERSION} for kind, obj in EXAMPLES.items()
}
"""Kind name to a valid v1beta1 object."""


def example_v1beta1(kind: str) -> dict[str, Any]:
    """A fresh copy of the v1beta1 example of ``kind``."""
    return copy.deepcopy(EXAMPLES_V1BETA1[kind])
