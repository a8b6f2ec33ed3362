"""spec.admission -> MutatingWebhookConfiguration and ValidatingWebhookConfiguration (pure rendering).

Every field of the spec maps to its admissionregistration/v1 twin. ``opts`` become one matchCondition on
``request.userInfo`` (and, with ``tenantMetadata``, on the object's tenant label and owner references), so
kube-apiserver skips the call for everyone else instead of Enclave receiving and allowing it, and an Enclave
outage blocks only those the hook is about. Generated configurations carry the managed-by label; that label is how pruning finds ours and
never touches a hand-made configuration.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Final

from enclave_core.api import names
from enclave_core.api.configuration import (
    TENANT_METADATA_CONDITION,
    MutatingAdmission,
    MutatingWebhook,
    ValidatingAdmission,
    ValidatingWebhook,
)
from enclave_core.api.meta import Entity
from enclave_core.selectors import LabelSelector
from enclave_core.snapshots.configuration import EffectiveConfiguration
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX

ADMISSION_GROUP: Final = "admissionregistration.k8s.io/v1"

JSON = dict[str, Any]


def _cel_strings(values: list[str]) -> str:
    return json.dumps(sorted(set(values)))


def user_condition(entities: list[Entity]) -> str:
    """A CEL expression true when the requester is one of ``entities``."""
    names = [e.name for e in entities if e.kind == "User"]
    names += [
        e.name if e.name.startswith(SERVICE_ACCOUNT_PREFIX) else SERVICE_ACCOUNT_PREFIX + e.name
        for e in entities
        if e.kind == "ServiceAccount"
    ]
    groups = [e.name for e in entities if e.kind == "Group"]
    parts = []
    if names:
        parts.append(f"request.userInfo.username in {_cel_strings(names)}")
    if groups:
        parts.append(f"request.userInfo.groups.exists(g, g in {_cel_strings(groups)})")
    return " || ".join(parts) or "false"


def _opts_conditions(
    webhook: ValidatingWebhook, config: EffectiveConfiguration, service_users: list[Entity]
) -> list[JSON]:
    opts = webhook.opts
    if opts is None or not (opts.administrators or opts.service_users or opts.tenant_metadata):
        return []
    audiences = []
    if opts.administrators:
        audiences.append(user_condition(list(config.spec.administrators or [])))
    if opts.service_users:
        audiences.append(user_condition(service_users))
    if opts.tenant_metadata:
        audiences.append(TENANT_METADATA_CONDITION)
    expression = " || ".join(f"({a})" for a in audiences)
    ignored = config.spec.ignore_user_with_groups or []
    if ignored:  # admission lets them pass untouched whatever else they are: never send them
        expression = f"!request.userInfo.groups.exists(g, g in {_cel_strings(ignored)}) && ({expression})"
    return [{"name": names.AUDIENCE_CONDITION, "expression": expression}]


def _selector(selector: LabelSelector) -> JSON:
    return selector.model_dump(mode="json", by_alias=True, exclude_none=True)


def _client_config(side: MutatingAdmission | ValidatingAdmission, path: str, ca_bundle: str | None) -> JSON:
    client = side.client
    result: JSON = {}
    if client.url:
        result["url"] = client.url.rstrip("/") + path
    elif client.service is not None:
        service_path = (client.service.path or "").rstrip("/") + path
        result["service"] = {
            "name": client.service.name,
            "namespace": client.service.namespace,
            "port": client.service.port,
            "path": service_path,
        }
    bundle = client.ca_bundle or ca_bundle
    if bundle:
        result["caBundle"] = bundle
    return result


def _webhook(
    webhook: ValidatingWebhook,
    side: MutatingAdmission | ValidatingAdmission,
    config: EffectiveConfiguration,
    ca_bundle: str | None,
    service_users: list[Entity],
) -> JSON:
    rendered: JSON = {
        "name": webhook.name,
        "clientConfig": _client_config(side, webhook.path, ca_bundle),
        "admissionReviewVersions": list(webhook.admission_review_versions),
        "sideEffects": webhook.side_effects,
        "failurePolicy": webhook.failure_policy,
        "matchPolicy": webhook.match_policy,
        "timeoutSeconds": webhook.timeout_seconds,
        "namespaceSelector": _selector(webhook.namespace_selector) if webhook.namespace_selector else {},
        "objectSelector": _selector(webhook.object_selector) if webhook.object_selector else {},
    }
    if webhook.rules is not None:  # None: another component owns the rules (enclave-quotas scopes its hook)
        rendered["rules"] = [rule.to_k8s() for rule in webhook.rules]
    conditions = [c.to_k8s() for c in webhook.match_conditions or []] + _opts_conditions(webhook, config, service_users)
    if conditions:
        rendered["matchConditions"] = conditions
    if isinstance(webhook, MutatingWebhook):
        rendered["reinvocationPolicy"] = webhook.reinvocation_policy
    return rendered


def render(
    config: EffectiveConfiguration, ca_pem: bytes | None, service_users: list[Entity] | None = None
) -> dict[str, JSON]:
    """Desired configurations keyed by kind; a side that is absent from the spec is absent here.

    ``service_users`` is who ``opts.serviceUsers`` sends: the effective ``users`` when not given; the controller
    adds TenantOwners with ``aggregate`` and promoted service accounts, as admission counts them tenant users."""
    audience = list(config.users) if service_users is None else service_users
    ca_bundle = base64.b64encode(ca_pem).decode() if ca_pem else None
    admission = config.spec.admission
    desired: dict[str, JSON] = {}
    if admission is None:
        return desired
    sides: list[tuple[str, str, MutatingAdmission | ValidatingAdmission | None]] = [
        ("MutatingWebhookConfiguration", config.mutating_configuration_name, admission.mutating),
        ("ValidatingWebhookConfiguration", config.validating_configuration_name, admission.validating),
    ]
    for kind, name, side in sides:
        if side is None:
            continue
        desired[kind] = {
            "apiVersion": ADMISSION_GROUP,
            "kind": kind,
            "metadata": {
                "name": name,
                "labels": {**(side.labels or {}), names.MANAGED_BY: names.CONFIG_MANAGER},
                "annotations": dict(side.annotations or {}),
            },
            "webhooks": [_webhook(w, side, config, ca_bundle, audience) for w in side.webhooks or []],
        }
    return desired
