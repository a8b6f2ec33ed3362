"""Adversarial: a tenant user with every RBAC right on namespaces tries each way to take, move or drop one.

RBAC lets them (``namespace_rights`` in the conftest); only the webhooks stand in the way, and every
path must be refused with the namespace left as it was: create, update (PUT), JSON patch, merge patch,
server-side apply, and the ``status`` and ``finalize`` subresources.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from kubernetes import client

from enclave_core.api.meta import Entity
from enclave_core.api.names import TENANT_LABEL
from enclave_testing.names import unique

from .harness import Enclave, refused

Attack = Callable[[client.CoreV1Api, str, str | None], Any]
"""(api as the attacker, target namespace, tenant label value to write)"""


def _with_label(api: client.CoreV1Api, name: str, value: str | None) -> Any:
    body = api.read_namespace(name)
    labels = dict(body.metadata.labels or {})
    if value is None:
        labels.pop(TENANT_LABEL, None)
    else:
        labels[TENANT_LABEL] = value
    body.metadata.labels = labels
    return body


def put(api: client.CoreV1Api, name: str, value: str | None) -> Any:
    return api.replace_namespace(name, _with_label(api, name, value))


def status(api: client.CoreV1Api, name: str, value: str | None) -> Any:
    return api.replace_namespace_status(name, _with_label(api, name, value))


def finalize(api: client.CoreV1Api, name: str, value: str | None) -> Any:
    return api.replace_namespace_finalize(name, _with_label(api, name, value))


def json_patch(api: client.CoreV1Api, name: str, value: str | None) -> Any:
    path = "/metadata/labels/" + TENANT_LABEL.replace("/", "~1")
    if value is None:
        return api.patch_namespace(name, [{"op": "remove", "path": path}])
    if not api.read_namespace(name).metadata.labels:
        return api.patch_namespace(name, [{"op": "add", "path": "/metadata/labels", "value": {TENANT_LABEL: value}}])
    return api.patch_namespace(name, [{"op": "add", "path": path, "value": value}])


def merge_patch(api: client.CoreV1Api, name: str, value: str | None) -> Any:
    return api.patch_namespace(
        name, {"metadata": {"labels": {TENANT_LABEL: value}}}, _content_type="application/merge-patch+json"
    )


def apply(api: client.CoreV1Api, name: str, value: str | None) -> Any:
    labels = {TENANT_LABEL: value} if value is not None else {"unrelated": "x"}
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    return api.patch_namespace(
        name, body, field_manager="attacker", force=True, _content_type="application/apply-patch+yaml"
    )


ATTACKS = [put, status, finalize, json_patch, merge_patch, apply]


@pytest.fixture
def scene(enclave: Enclave) -> dict[str, Any]:
    """mallory owns tenant ``evil`` (with one namespace); victim tenant ``solar`` has one; one is unowned."""
    mallory, alice = unique("mallory"), unique("alice")
    evil = enclave.tenant(unique("evil"), owners=[Entity(kind="User", name=mallory)])
    solar = enclave.tenant(unique("solar"), owners=[Entity(kind="User", name=alice)])
    enclave.owner(mallory).create_namespace({"metadata": {"name": f"{evil.name}-home"}})
    enclave.owner(alice).create_namespace({"metadata": {"name": f"{solar.name}-prod"}})
    unowned = unique("shared-infra")
    client.CoreV1Api(enclave.kube).create_namespace({"metadata": {"name": unowned}})
    enclave.sync()
    return {"api": enclave.owner(mallory), "evil": evil, "solar": solar, "unowned": unowned}


def _unchanged(enclave: Enclave, name: str, before: tuple[dict[str, str], list[Any]]) -> None:
    assert (enclave.labels(name), enclave.owner_references(name)) == before


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.__name__)
def test_cannot_adopt_an_unowned_namespace(enclave: Enclave, scene: dict[str, Any], attack: Attack) -> None:
    name = scene["unowned"]
    before = (enclave.labels(name), enclave.owner_references(name))
    refused(lambda: attack(scene["api"], name, scene["evil"].name), "not to a tenant of yours")
    _unchanged(enclave, name, before)


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.__name__)
def test_cannot_take_another_tenants_namespace(enclave: Enclave, scene: dict[str, Any], attack: Attack) -> None:
    name = f"{scene['solar'].name}-prod"
    before = (enclave.labels(name), enclave.owner_references(name))
    refused(lambda: attack(scene["api"], name, scene["evil"].name), scene["solar"].name)
    _unchanged(enclave, name, before)


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.__name__)
def test_cannot_move_own_namespace_to_another_tenant(enclave: Enclave, scene: dict[str, Any], attack: Attack) -> None:
    name = f"{scene['evil'].name}-home"
    before = (enclave.labels(name), enclave.owner_references(name))
    refused(lambda: attack(scene["api"], name, scene["solar"].name), TENANT_LABEL)
    _unchanged(enclave, name, before)


@pytest.mark.parametrize("attack", [put, status, finalize, json_patch, merge_patch], ids=lambda a: a.__name__)
def test_cannot_drop_ownership_of_own_namespace(enclave: Enclave, scene: dict[str, Any], attack: Attack) -> None:
    name = f"{scene['evil'].name}-home"
    before = (enclave.labels(name), enclave.owner_references(name))
    refused(lambda: attack(scene["api"], name, None), TENANT_LABEL)
    _unchanged(enclave, name, before)


def test_server_side_apply_without_the_label_keeps_ownership(enclave: Enclave, scene: dict[str, Any]) -> None:
    """SSA of a manifest without the label does not remove it (another manager owns it): no refusal needed."""
    name = f"{scene['evil'].name}-home"
    apply(scene["api"], name, None)
    assert enclave.labels(name)[TENANT_LABEL] == scene["evil"].name


def test_cannot_delete_namespaces_outside_own_tenants(enclave: Enclave, scene: dict[str, Any]) -> None:
    # kube-system itself is undeletable (NamespaceLifecycle refuses before any webhook); any other is ours to guard
    api: client.CoreV1Api = scene["api"]
    for name in (scene["unowned"], f"{scene['solar'].name}-prod"):
        refused(partial(api.delete_namespace, name), "not to a tenant of yours")
        assert client.CoreV1Api(enclave.kube).read_namespace(name).status.phase == "Active"


def test_cannot_drop_owner_references(enclave: Enclave, scene: dict[str, Any]) -> None:
    name = f"{scene['evil'].name}-home"
    before = (enclave.labels(name), enclave.owner_references(name))
    refused(lambda: scene["api"].patch_namespace(name, [{"op": "remove", "path": "/metadata/ownerReferences"}]))
    _unchanged(enclave, name, before)


@pytest.mark.parametrize("target", ["kube-system", "default"])
@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.__name__)
def test_cannot_touch_system_namespaces(enclave: Enclave, scene: dict[str, Any], attack: Attack, target: str) -> None:
    """Even a user whom RBAC lets write every namespace cannot label kube-system (or default, standing for any
    shared namespace outside the tenants) into a tenant: the namespace hooks are not narrowed by namespace."""
    before = (enclave.labels(target), enclave.owner_references(target))
    refused(lambda: attack(scene["api"], target, scene["evil"].name), "not to a tenant of yours")
    _unchanged(enclave, target, before)


def test_create_with_a_forged_owner_reference_lands_in_own_tenant(enclave: Enclave, scene: dict[str, Any]) -> None:
    solar = scene["solar"]
    forged = {"apiVersion": "enclave.dev/v1beta2", "kind": "Tenant", "name": solar.name, "uid": solar.uid}
    name = f"{scene['evil'].name}-forged"
    scene["api"].create_namespace({"metadata": {"name": name, "ownerReferences": [forged]}})
    assert enclave.labels(name)[TENANT_LABEL] == scene["evil"].name
    assert enclave.owner_references(name) == [("Tenant", scene["evil"].name, scene["evil"].uid)]
    refused(
        lambda: scene["api"].create_namespace(
            {"metadata": {"name": unique("x"), "labels": {TENANT_LABEL: solar.name}}}
        ),
        "do not own",
    )
