"""One valid, rich example object per kind, as a user would write it (plain dicts).

They exercise most fields, so the unit tests round-trip them through the models and the
integration tests prove kube-apiserver accepts them and stores what the models expect. Component
tests may start from them too. Each call returns a fresh deep copy, safe to modify.
"""

from __future__ import annotations

import copy
from typing import Any, Final

__all__ = ["EXAMPLES", "STATUS_EXAMPLES", "example", "status_example"]

_MATCHER: Final = {"exact": ["app.example.com"], "exp": r"^.*\.example\.com$"}
_RULE: Final[dict[str, Any]] = {
    "audience": [{"kind": "Group", "name": "developers"}],
    "enforce": {
        "action": "deny",
        "conditions": [{"name": "not-system", "expression": "!request.userInfo.username.startsWith('system:')"}],
        "ingress": {"hostnames": [_MATCHER], "types": ["Ingress", "HTTPRoute"]},
        "metadata": [
            {
                "kinds": ["*"],
                "apiGroups": ["apps/v1"],
                "labels": {"team": {"required": True, "values": [{"exp": "^[a-z]+$", "negate": True}]}},
                "annotations": {"owner": {"default": "platform", "managed": "platform"}},
            }
        ],
        "network": {"policies": {"egress": {"cidrs": ["10.0.0.0/8", "fd00::/8"]}, "ingress": {"cidrs": []}}},
        "services": {
            "types": ["NodePort", "LoadBalancer"],
            "externalIPs": {"cidrs": ["192.0.2.10"]},
            "externalNames": {"hostnames": [{"exact": ["db.example.com"]}]},
            "loadBalancers": {"cidrs": ["198.51.100.0/24"]},
            "nodePorts": {"ports": [{"from": 30000, "to": 30100}, {"from": 32000, "to": 32000}]},
        },
        "storage": {"volumes": [{"name": "shared", "selector": {"matchLabels": {"shared": "true"}}}]},
        "workloads": {
            "qosClasses": ["Guaranteed"],
            "targets": ["Pod", "Deployment/containers"],
            "schedulers": [{"exact": ["default-scheduler"]}],
            "disruptionBudgets": {"required": True, "maxUnavailable": "25%"},
            "placement": {
                "schedulers": [{"exact": ["default-scheduler"]}],
                "priorityClasses": [{"exp": "^tenant-"}],
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            },
            "registries": [{"url": r"^registry\.example\.com/", "pullPolicies": ["Always"]}],
            "resources": {"limits": {"required": ["memory"], "max": {"memory": "8Gi", "cpu": 4}}},
            "security": {"privileged": True, "capabilities": ["NET_ADMIN"]},
        },
    },
    "mutate": [
        {"name": "team-label", "metadata": {"kinds": ["ConfigMap"], "labels": {"team": "a"}}},
        {
            "workloads": {
                "nodeSelector": {"pool": "tenants"},
                "imagePullPolicy": "Always",
                "defaultRequests": {"cpu": "100m", "memory": "128Mi"},
            }
        },
    ],
    "quota": [
        {
            "name": "compute",
            "hard": {"requests.cpu": "8", "pods": 50},
            "scopes": ["NotTerminating"],
            "scopeSelector": {"matchExpressions": [{"operator": "Exists", "scopeName": "PriorityClass"}]},
        }
    ],
}

_SOURCE_SELECTOR: Final = {
    "celExpressions": ["object.metadata.name != 'skip'"],
    "fieldSelectors": ["{.status.phase} == 'Bound'"],
    "matchLabels": {"count": "yes"},
    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold", "silver"]}],
}

_WEBHOOK: Final[dict[str, Any]] = {
    "name": "namespaces.enclave.dev",
    "path": "/namespaces",
    "admissionReviewVersions": ["v1"],
    "sideEffects": "None",
    "failurePolicy": "Fail",
    "matchPolicy": "Equivalent",
    "timeoutSeconds": 5,
    "matchConditions": [
        {"name": "not-kube-system", "expression": "request.namespace != 'kube-system'"},
        {"name": "enclave.dev/users", "expression": "true"},
    ],
    "namespaceSelector": {"matchExpressions": [{"key": "enclave.dev/tenant", "operator": "Exists"}]},
    "objectSelector": {},
    "opts": {"administrators": False, "serviceUsers": True},
    "rules": [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["namespaces", "namespaces/status"],
            "scope": "Cluster",
        },
        {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*/*"]},
    ],
}

_BLOCK: Final[dict[str, Any]] = {
    "additionalMetadata": {"labels": {"replicated": "true"}, "annotations": {"by": "enclave"}},
    "context": {
        "resources": [
            {"kind": "ConfigMap", "apiVersion": "v1", "index": "settings", "name": "settings", "namespace": "shared"},
            {"kind": "*", "selector": {"matchLabels": {"ctx": "yes"}}, "optional": False},
        ]
    },
    "generators": [{"missingKey": "error", "template": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gen\n"}],
    "namespaceSelector": {"matchLabels": {"env": "prod"}},
    "namespacedItems": [{"kind": "Secret", "apiVersion": "v1", "namespace": "shared", "name": "registry"}],
    "rawItems": [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "hello", "labels": {"a": "b"}},
            "data": {"greeting": "hello", "nested": "x"},
        }
    ],
    "policy": {"condition": "object == null", "creation": "Merge", "deletion": "Orphan", "force": True},
}

EXAMPLES: Final[dict[str, dict[str, Any]]] = {
    "ServiceConfiguration": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "ServiceConfiguration",
        "metadata": {"name": "default"},
        "spec": {
            "cacheInvalidation": "12h30m",
            "enableTLSReconciler": True,
            "rbac": {"deleter": "custom-deleter"},
            "administrators": [{"kind": "User", "name": "alice"}],
            "admission": {
                "serviceName": "enclave-webhook-service",
                "mutating": {
                    "client": {"service": {"name": "enclave-webhook-service", "namespace": "enclave-system"}},
                    "labels": {"app": "enclave"},
                    "webhooks": [{**_WEBHOOK, "reinvocationPolicy": "IfNeeded"}],
                },
                "validating": {
                    "client": {"url": "https://webhooks.example.com:8443/enclave", "caBundle": "Y2E="},
                    "annotations": {"note": "external"},
                    "name": "enclave-validating",
                    "webhooks": [_WEBHOOK],
                },
            },
            "allowServiceAccountPromotion": True,
            "events": {"namespace": "enclave-system"},
            "forceTenantPrefix": True,
            "ignoreUserWithGroups": ["system:masters"],
            "impersonation": {"endpoint": "https://kubernetes.default.svc", "skipTlsVerify": False},
            "nodeMetadata": {
                "forbiddenLabels": {
                    "denied": ["node-role.kubernetes.io/control-plane"],
                    "deniedRegex": "^.*\\.k8s\\.io/",
                },
                "forbiddenAnnotations": {"denied": ["example.com/secret"]},
            },
            "overrides": {"TLSSecretName": "enclave-tls-custom"},
            "protectedNamespaceRegex": "^(kube|enclave)-.*$",
            "proxy": {
                "kinds": [
                    {"kind": "StorageClasses", "selector": {"matchLabels": {"enclave.dev/shared": "true"}}},
                    {"kind": "PersistentVolumes", "claimed": True},
                ]
            },
            "users": [
                {"kind": "Group", "name": "enclave.dev"},
                {"kind": "ServiceAccount", "name": "system:serviceaccount:ci:deployer"},
            ],
        },
    },
    "Tenant": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "Tenant",
        "metadata": {"name": "solar", "labels": {"env": "prod"}},
        "spec": {
            "owners": [
                {"kind": "User", "name": "alice"},
                {"kind": "Group", "name": "solar-admins", "clusterRoles": ["admin"]},
            ],
            "permissions": {"matchOwners": [{"matchLabels": {"team": "solar"}}]},
            "namespaceOptions": {
                "quota": 3,
                "additionalMetadata": {
                    "labels": {"tenant-tier": "gold"},
                    "annotations": {"contact": "solar@example.com"},
                },
                "forbiddenLabels": {"denied": ["forbidden"], "deniedRegex": "^secret-"},
                "forbiddenAnnotations": {"denied": ["nope"]},
            },
            "nodeSelector": {"pool": "solar"},
            "forceTenantPrefix": False,
            "cordoned": False,
            "preventDeletion": True,
            "additionalRoleBindings": [
                {
                    "clusterRoleName": "view",
                    "subjects": [
                        {"kind": "Group", "name": "auditors", "apiGroup": "rbac.authorization.k8s.io"},
                        {"kind": "ServiceAccount", "name": "robot", "namespace": "solar-ci"},
                    ],
                }
            ],
            "rules": [{**_RULE, "namespaceSelector": {"matchLabels": {"env": "prod"}}}],
            "data": {"region": "eu", "replicas": 3, "nested": {"list": [1, "two"]}},
            "proxy": {
                "kinds": [
                    {"kind": "StorageClasses", "names": [{"exact": ["gold"]}, {"exp": "^solar-.*$"}]},
                    {"kind": "PersistentVolumes", "verbs": ["get", "list", "watch", "delete"]},
                    {"kind": "Nodes", "verbs": []},
                ]
            },
        },
    },
    "TenantOwner": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "TenantOwner",
        "metadata": {"name": "solar-team", "labels": {"team": "solar"}},
        "spec": {"kind": "Group", "name": "solar-team", "clusterRoles": ["admin", "view"], "aggregate": True},
    },
    "RuleStatus": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "RuleStatus",
        "metadata": {"name": "default"},
        "spec": [_RULE, {"enforce": {"action": "audit", "services": {"types": ["ExternalName"]}}}],
    },
    "CustomQuota": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "CustomQuota",
        "metadata": {"name": "storage"},
        "spec": {
            "limit": "100Gi",
            "options": {"emitMetricPerClaimUsage": True},
            "sources": [
                {
                    "kind": "PersistentVolumeClaim",
                    "path": ".spec.resources.requests.storage",
                    "selectors": [_SOURCE_SELECTOR],
                },
                {"kind": "Pod", "apiVersion": "v1", "op": "count"},
                {"kind": "*", "apiVersion": "apps/*", "op": "sub", "cel": "object.spec.replicas"},
            ],
            "scopeSelectors": [{"matchLabels": {"quota": "storage"}}],
        },
    },
    "GlobalCustomQuota": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "GlobalCustomQuota",
        "metadata": {"name": "gpus"},
        "spec": {
            "limit": 8,
            "sources": [{"kind": "Pod", "cel": "object.spec.containers.map(c, c.resources.limits['nvidia.com/gpu'])"}],
            "namespaceSelectors": [
                {"matchExpressions": [{"key": "enclave.dev/tenant", "operator": "In", "values": ["solar"]}]}
            ],
        },
    },
    "GlobalResourceQuota": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "GlobalResourceQuota",
        "metadata": {"name": "solar-compute"},
        "spec": {
            "quota": {
                "hard": {"requests.cpu": "10", "limits.memory": "20Gi", "pods": 100},
                "scopes": ["NotBestEffort"],
                "scopeSelector": {
                    "matchExpressions": [{"operator": "In", "scopeName": "PriorityClass", "values": ["high"]}]
                },
            },
            "namespaceSelectors": [{"matchLabels": {"enclave.dev/tenant": "solar"}}, {}],
        },
    },
    "QuantityLedger": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "QuantityLedger",
        "metadata": {"name": "customquota-solar-storage"},
        "spec": {
            "targetRef": {
                "kind": "CustomQuota",
                "apiGroup": "enclave.dev",
                "name": "storage",
                "namespace": "solar-prod",
                "uid": "0a1b2c3d-0000-4000-8000-000000000001",
            }
        },
    },
    "ResourcePool": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "ResourcePool",
        "metadata": {"name": "solar-pool"},
        "spec": {
            "quota": {"hard": {"requests.cpu": "16", "requests.memory": "64Gi"}},
            "config": {"defaultsZero": True, "orderedQueue": True},
            "defaults": {"requests.cpu": "500m"},
            "selectors": [{"matchLabels": {"enclave.dev/tenant": "solar"}}],
        },
    },
    "ResourcePoolClaim": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "ResourcePoolClaim",
        "metadata": {"name": "more-cpu"},
        "spec": {"claim": {"requests.cpu": "2", "requests.memory": 1073741824}, "pool": "solar-pool"},
    },
    "GlobalTenantResource": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "GlobalTenantResource",
        "metadata": {"name": "registry-secret"},
        "spec": {
            "resources": [_BLOCK, {"rawItems": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}]}],
            "resyncPeriod": "5m",
            "settings": {"adopt": True},
            "cordoned": False,
            "dependsOn": [{"name": "base"}],
            "pruningOnDelete": False,
            "scope": "Tenant",
            "serviceAccount": {"name": "replicator", "namespace": "enclave-system"},
            "tenantSelector": {"matchLabels": {"env": "prod"}},
        },
    },
    "TenantResource": {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "TenantResource",
        "metadata": {"name": "team-config"},
        "spec": {
            "resources": [_BLOCK],
            "resyncPeriod": "1h",
            "serviceAccount": {"name": "robot", "namespace": "solar-ci"},
        },
    },
}
"""Kind name to example object."""


def example(kind: str) -> dict[str, Any]:
    """A fresh copy of the example of ``kind``."""
    return copy.deepcopy(EXAMPLES[kind])


_T: Final = "2025-01-02T03:04:05Z"
_READY: Final = {
    "type": "Ready",
    "status": "True",
    "reason": "Reconciled",
    "message": "",
    "lastTransitionTime": _T,
    "observedGeneration": 1,
}
_REF: Final = {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "namespace": "solar-prod", "uid": "u-1"}
_REPLICATION_STATUS: Final[dict[str, Any]] = {
    "size": 1,
    "conditions": [_READY],
    "observedGeneration": 1,
    "selectedTenants": ["solar"],
    "serviceAccount": {"name": "replicator", "namespace": "enclave-system"},
    "processedItems": [
        {
            "group": "",
            "version": "v1",
            "kind": "ConfigMap",
            "name": "hello",
            "namespace": "solar-prod",
            "origin": "0/rawItems/0",
            "tenant": "solar",
            "status": {
                "status": "True",
                "type": "Ready",
                "created": True,
                "clusterScoped": False,
                "lastApply": _T,
                "message": "applied",
                "policy": {"creation": "Owner", "deletion": "Remove", "force": False, "protect": True},
            },
        }
    ],
}
_QUOTA_STATUS: Final[dict[str, Any]] = {
    "conditions": [_READY],
    "targets": [
        {"group": "", "version": "v1", "kind": "PersistentVolumeClaim", "path": ".spec", "scope": "Namespaced"}
    ],
    "claims": [
        {"group": "", "version": "v1", "kind": "PersistentVolumeClaim", "name": "data", "uid": "u-2", "usage": "10Gi"}
    ],
    "observedGeneration": 1,
    "usage": {"available": "90Gi", "used": "10Gi"},
}

STATUS_EXAMPLES: Final[dict[str, dict[str, Any]]] = {
    "ServiceConfiguration": {
        "conditions": [_READY],
        "observedGeneration": 1,
        "tenants": ["solar", "wind"],
        "users": [{"kind": "Group", "name": "enclave.dev"}],
    },
    "Tenant": {
        "size": 2,
        "namespaces": ["solar-dev", "solar-prod"],
        "owners": [{"kind": "User", "name": "alice", "clusterRoles": ["admin"]}],
        "conditions": [_READY, {**_READY, "type": "Cordoned", "status": "False", "reason": "Active"}],
        "observedGeneration": 1,
    },
    "TenantOwner": {"tenants": ["solar"], "conditions": [_READY], "observedGeneration": 1},
    "RuleStatus": {
        "rules": [{**_RULE, "origin": {"kind": "Tenant", "name": "solar", "index": 0}}],
        "size": 1,
        "conditions": [_READY],
        "observedGeneration": 1,
    },
    "CustomQuota": _QUOTA_STATUS,
    "GlobalCustomQuota": {**_QUOTA_STATUS, "namespaces": ["solar-prod"]},
    "GlobalResourceQuota": {
        "conditions": [_READY],
        "total": {"hard": {"pods": 100}, "used": {"pods": 3}, "available": {"pods": 97}},
        "namespaceCount": 1,
        "namespaceUsage": {"solar-prod": {"used": {"pods": 3}}},
        "namespaces": ["solar-prod"],
        "observedGeneration": 1,
    },
    "QuantityLedger": {
        "allocated": "20Gi",
        "reserved": "10Gi",
        "conditions": [_READY],
        "reservations": [
            {
                "id": "req-1",
                "objectRef": _REF,
                "usage": "10Gi",
                "delta": "10Gi",
                "createdAt": _T,
                "updatedAt": _T,
                "expiresAt": "2025-01-02T03:05:05Z",
            }
        ],
        "pendingDeletes": [{"createdAt": _T, "objectRef": {**_REF, "uid": ""}, "id": "req-2"}],
        "resourceQuota": {
            "allocated": {"pods": 4},
            "initialized": True,
            "namespaces": ["solar-prod"],
            "observedGeneration": 2,
            "reserved": {"pods": 1},
            "used": {"pods": 3},
            "reservations": [
                {"id": "req-3", "objectRef": _REF, "createdAt": _T, "updatedAt": _T, "usage": {"pods": 1}}
            ],
        },
    },
    "ResourcePool": {
        "conditions": [_READY],
        "allocation": {
            "hard": {"requests.cpu": "16"},
            "used": {"requests.cpu": "2"},
            "available": {"requests.cpu": "14"},
        },
        "claimCount": 1,
        "claims": {
            "solar-prod": [
                {"name": "more-cpu", "namespace": "solar-prod", "uid": "u-3", "claims": {"requests.cpu": "2"}}
            ]
        },
        "exhaustions": {"requests.memory": {"available": "1Gi", "requesting": "2Gi"}},
        "namespaceCount": 1,
        "namespaces": ["solar-prod"],
        "observedGeneration": 1,
    },
    "ResourcePoolClaim": {
        "conditions": [_READY],
        "allocation": {
            "hard": {"requests.cpu": "16"},
            "used": {"requests.cpu": "2"},
            "available": {"requests.cpu": "14"},
        },
        "condition": _READY,
        "observedGeneration": 1,
        "pool": {"name": "solar-pool", "uid": "u-4"},
    },
    "GlobalTenantResource": _REPLICATION_STATUS,
    "TenantResource": _REPLICATION_STATUS,
}
"""Kind name to a valid ``status`` (what a controller would write)."""


def status_example(kind: str) -> dict[str, Any]:
    """A fresh copy of the status example of ``kind``."""
    return copy.deepcopy(STATUS_EXAMPLES[kind])
