"""The generic quota hook's rules: exactly the resources some quota counts.

enclave-config writes the hook ``quotas.enclave.dev`` without rules (the ServiceConfiguration leaves them
out); the Lease holder here sets them by server-side apply under its own field manager, so neither component
overwrites the other's fields. Every other write in the cluster therefore never reaches Enclave, and a new
quota on a new kind widens the hook within one pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from enclave_core.snapshots.quotas import QuotaEntry

ADMISSION_PATH: Final = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
OPERATIONS: Final = ["CREATE", "UPDATE", "DELETE"]

JSON = dict[str, Any]


def rules(entries: Iterable[QuotaEntry]) -> list[JSON]:
    """One rule per (group, scope), resources sorted; stable, so an unchanged set compares equal."""
    grouped: dict[tuple[str, str], set[str]] = {}
    for entry in entries:
        for source in entry.sources:
            scope = "Namespaced" if source.namespaced else "Cluster"
            grouped.setdefault((source.group, scope), set()).add(source.resource)
    return [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": list(OPERATIONS),
            "resources": sorted(resources),
            "scope": scope,
        }
        for (group, scope), resources in sorted(grouped.items())
    ]


def live_rules(configuration: JSON | None, hook: str) -> list[JSON] | None:
    """The hook's rules in the live configuration; None when the configuration or the hook is absent."""
    for webhook in (configuration or {}).get("webhooks") or ():
        if webhook.get("name") == hook:
            return list(webhook.get("rules") or [])
    return None


def apply_body(configuration: str, hook: str, wanted: list[JSON]) -> JSON:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": configuration},
        "webhooks": [{"name": hook, "rules": wanted}],
    }
