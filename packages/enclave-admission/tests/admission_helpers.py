"""Hand-built snapshots and AdmissionReviews for the pure decision tests."""

from __future__ import annotations

import base64
import copy
import itertools
import json
from typing import Any

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.api.configuration import ServiceConfigurationSpec
from enclave_core.api.meta import Entity
from enclave_core.snapshots.configuration import effective
from enclave_core.snapshots.tenancy import TenancySnapshot, TenantView

JSON = dict[str, Any]
ALICE = ("alice", ("enclave.dev", "system:authenticated"))
ADMIN = ("root-admin", ("enclave-admins", "system:authenticated"))
_uids = itertools.count(1)


def user(name: str, *groups: str) -> tuple[str, tuple[str, ...]]:
    return name, (*groups, "system:authenticated")


def tenant(name: str, *owners: str, **fields: Any) -> TenantView:
    entities = [Entity(kind="User", name=owner) for owner in owners]
    entities += fields.pop("extra_owners", [])
    return TenantView(name=name, uid=f"uid-{name}", owners=entities, **fields)


def make_state(tenants: list[TenantView], **spec: Any) -> State:
    spec.setdefault("administrators", [{"kind": "Group", "name": "enclave-admins"}])
    state = State()
    state.set_config(effective("default", 1, ServiceConfigurationSpec.model_validate(spec)))
    state.set_tenancy(TenancySnapshot(tenants=tenants))
    return state


def namespace(name: str, labels: dict[str, str] | None = None, **meta: Any) -> JSON:
    metadata: JSON = {"name": name, **meta}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def review(
    who: tuple[str, tuple[str, ...]],
    operation: str,
    obj: JSON | None,
    old: JSON | None = None,
    *,
    resource: str = "namespaces",
    group: str = "",
    kind: str = "Namespace",
    sub_resource: str = "",
    namespace: str = "",
    dry_run: bool = False,
) -> JSON:
    source = obj or old or {}
    request: JSON = {
        "uid": f"req-{next(_uids)}",
        "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": resource},
        "name": source.get("metadata", {}).get("name", ""),
        "operation": operation,
        "userInfo": {"username": who[0], "groups": list(who[1])},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    if namespace:
        request["namespace"] = namespace
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def request(*args: Any, **kwargs: Any) -> AdmissionRequest:
    return AdmissionRequest.from_review(review(*args, **kwargs))


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def apply_patch(obj: JSON, decision: Decision | list[JSON]) -> JSON:
    """A small RFC 6902 applier (add/remove/replace on objects), enough to check what the mutation produces."""
    operations = decision if isinstance(decision, list) else list(decision.patch)
    result = copy.deepcopy(obj)
    for operation in operations:
        *parents, last = [_unescape(p) for p in operation["path"].split("/")[1:]]
        target = result
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if operation["op"] == "add" and isinstance(target, list) and last == "-":
            target.append(copy.deepcopy(operation["value"]))
        elif operation["op"] in ("add", "replace"):
            target[int(last) if isinstance(target, list) else last] = copy.deepcopy(operation["value"])
        elif operation["op"] == "remove":
            del target[last]
        else:
            raise AssertionError(f"unexpected op {operation['op']}")
    return result


def decode_patch(response: JSON) -> list[JSON]:
    patch: list[JSON] = json.loads(base64.b64decode(response["response"]["patch"]))
    return patch
