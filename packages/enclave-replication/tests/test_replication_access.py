"""What the controller asks before it watches: the SelfSubjectAccessReviews and how long an answer holds.

kube-apiserver's own answers are exercised in tests/integration/replication/test_chart_rbac.py (the controller
with exactly the chart's RBAC) and tests/security/test_rbac_access.py; here an authorizer of a few lines stands
in for it so the questions asked and the caching can be pinned exactly."""

from __future__ import annotations

import asyncio
from typing import Any

from enclave_core.kube.events import EventRecorder
from enclave_core.kube.rest import JSON, KubeError
from enclave_core.snapshots.hub import SnapshotHub
from enclave_replication import access
from enclave_replication.access import WatchAccess
from enclave_replication.controller import ReplicationController, Settings
from enclave_replication.discovery import Resource
from enclave_testing.memorykube import MemoryKube

SECRETS = Resource("v1", "Secret", "secrets", namespaced=True)
DEPLOYMENTS = Resource("apps/v1", "Deployment", "deployments", namespaced=True)


class Authorizer(MemoryKube):
    """Answers SelfSubjectAccessReviews from ``allowed``: {(group, resource, namespace)}; records every question."""

    def __init__(self, allowed: set[tuple[str, str, str]], broken: bool = False) -> None:
        super().__init__()
        self.allowed = allowed
        self.broken = broken
        self.questions: list[dict[str, Any]] = []

    async def create(self, path: str, body: JSON) -> JSON:
        assert path == access.REVIEWS
        if self.broken:
            raise KubeError(500, "InternalError", "etcd is gone")
        attributes = body["spec"]["resourceAttributes"]
        self.questions.append(attributes)
        key = (attributes["group"], attributes["resource"], attributes.get("namespace", ""))
        return {"status": {"allowed": key in self.allowed}}


def test_list_and_watch_are_asked_in_the_resources_group_and_namespace() -> None:
    kube = Authorizer({("apps", "deployments", "team-a")})
    watch = WatchAccess(kube)
    assert asyncio.run(watch.allowed(DEPLOYMENTS, "team-a")) is True
    assert kube.questions == [
        {"group": "apps", "resource": "deployments", "verb": "list", "namespace": "team-a"},
        {"group": "apps", "resource": "deployments", "verb": "watch", "namespace": "team-a"},
    ]
    kube.questions.clear()
    assert asyncio.run(watch.allowed(SECRETS)) is False
    assert kube.questions[0] == {"group": "", "resource": "secrets", "verb": "list"}, "cluster-wide: no namespace"


def test_answers_are_remembered_refusals_briefly(monkeypatch: Any) -> None:
    kube = Authorizer({("", "secrets", "team-a")})
    watch = WatchAccess(kube)
    now = [1000.0]
    monkeypatch.setattr("enclave_replication.access.time.monotonic", lambda: now[0])

    async def ask() -> tuple[bool, bool]:
        return await watch.allowed(SECRETS, "team-a"), await watch.allowed(SECRETS, "team-b")

    assert asyncio.run(ask()) == (True, False)
    asked = len(kube.questions)
    assert asyncio.run(ask()) == (True, False)
    assert len(kube.questions) == asked, "both answers remembered"
    kube.allowed.add(("", "secrets", "team-b"))  # enclave-tenants binds the grant in the new namespace
    now[0] += access.DENIED_FOR + 1
    assert asyncio.run(ask()) == (True, True), "a refusal is asked again after DENIED_FOR, an allowance is not"
    assert len(kube.questions) == asked + 2


def test_an_unanswered_review_is_a_refusal_not_remembered() -> None:
    kube = Authorizer({("", "secrets", "")}, broken=True)
    watch = WatchAccess(kube)
    assert asyncio.run(watch.allowed(SECRETS)) is False
    kube.broken = False
    assert asyncio.run(watch.allowed(SECRETS)) is True


def test_a_namespace_that_left_the_tenants_keeps_only_the_watches_still_allowed() -> None:
    """When a namespace is deleted or leaves the tenants, enclave-tenants' read grant there goes: its
    per-namespace watches are asked about afresh and stopped where refused (instead of retrying forever), and
    kept where the right still holds (a ``sourceNamespaces`` binding)."""

    async def scenario() -> tuple[set[str], bool, bool]:
        kube = Authorizer({("", "secrets", "sources")})
        controller = ReplicationController(kube, Settings(), SnapshotHub("test"), EventRecorder(kube, "replication"))
        watched = {"sources": "/api/v1/namespaces/sources/secrets", "left": "/api/v1/namespaces/left/secrets"}
        tasks = {}
        for namespace, path in watched.items():
            # what an allowed answer remembered from before the grant went looks like
            controller.access._answers[("v1", "secrets", namespace)] = (True, 1e12)
            tasks[namespace] = asyncio.create_task(asyncio.sleep(3600))
            controller._managed_tasks[path] = tasks[namespace]
            controller._watched_kinds[path] = SECRETS
        await controller._recheck("left")
        await controller._recheck("sources")
        await asyncio.sleep(0)
        remaining = set(controller._managed_tasks)
        kept, stopped = not tasks["sources"].cancelled(), tasks["left"].cancelled()
        tasks["sources"].cancel()
        await controller.renderer.close()
        return remaining, kept, stopped

    remaining, kept, stopped = asyncio.run(scenario())
    assert remaining == {"/api/v1/namespaces/sources/secrets"}
    assert kept
    assert stopped
