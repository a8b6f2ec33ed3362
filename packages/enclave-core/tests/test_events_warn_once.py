"""EventRecorder.warn_once: one Warning per distinct problem of an object, the message within the limit."""

from __future__ import annotations

from typing import Any

from enclave_core.kube.events import MESSAGE_LIMIT, EventRecorder
from enclave_testing.memorykube import MemoryKube

TENANT: dict[str, Any] = {
    "apiVersion": "enclave.dev/v1beta2",
    "kind": "Tenant",
    "metadata": {"name": "solar", "uid": "u1"},
}


def _events(kube: MemoryKube) -> list[dict[str, Any]]:
    return [obj for path, obj in kube.objects.items() if "/events/" in path]


async def test_the_same_problem_is_said_once_and_again_after_the_object_was_fine() -> None:
    kube = MemoryKube()
    recorder = EventRecorder(kube, "enclave-test")
    for _ in range(3):
        await recorder.warn_once("Tenant/solar", TENANT, "InvalidSpec", "spec.owners: empty", namespace="ev")
    assert [e["reason"] for e in _events(kube)] == ["InvalidSpec"]
    await recorder.warn_once("Tenant/solar", TENANT, "InvalidSpec", "spec.owners: still empty", namespace="ev")
    assert len(_events(kube)) == 2, "another message is another problem"
    recorder.fine("Tenant/solar")
    await recorder.warn_once("Tenant/solar", TENANT, "InvalidSpec", "spec.owners: still empty", namespace="ev")
    assert len(_events(kube)) == 3, "a problem that comes back is said again"
    assert {e["metadata"]["namespace"] for e in _events(kube)} == {"ev"}
    assert {e["type"] for e in _events(kube)} == {"Warning"}


async def test_messages_that_differ_only_past_the_limit_are_one_problem() -> None:
    kube = MemoryKube()
    recorder = EventRecorder(kube, "enclave-test")
    head = "x" * MESSAGE_LIMIT
    await recorder.warn_once("Tenant/solar", TENANT, "Bad", head + "a")
    await recorder.warn_once("Tenant/solar", TENANT, "Bad", head + "b")
    [event] = _events(kube)
    assert len(event["message"]) == MESSAGE_LIMIT
    assert event["message"].endswith("[... cut]")


async def test_keys_are_apart() -> None:
    kube = MemoryKube()
    recorder = EventRecorder(kube, "enclave-test")
    await recorder.warn_once("Tenant/solar", TENANT, "Bad", "same words")
    await recorder.warn_once("TenantOwner/solar", TENANT, "Bad", "same words")
    assert len(_events(kube)) == 2
