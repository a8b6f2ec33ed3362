"""What the controller itself may list and watch, asked of kube-apiserver (SelfSubjectAccessReview).

The chart grants enclave-replication no cluster-wide read of every kind (it could read every Secret, the CA key
in the release namespace among them): it reads the kinds of ``replication.rbac.readResources`` cluster-wide, and
every kind only where ``enclave-replication-read`` is bound, which enclave-tenants does in every tenant namespace
and the chart in ``replication.rbac.sourceNamespaces``. The informers (replicated objects, to undo drift; source
collections, to reconcile on change) therefore watch a kind cluster-wide when that is allowed, in each namespace
where it is allowed otherwise, and not at all where it is not (a watch that can only fail would retry forever and
mark the process as not watching): a kind that cannot be watched is still read when a reconcile runs, as the
acting identity, and its changes are seen at the next resync.
"""

from __future__ import annotations

import time
from typing import Final

from enclave_core.kube.rest import Kube, KubeError
from enclave_replication.discovery import Resource

DENIED_FOR: Final = 10.0
"""Seconds a refusal is remembered: enclave-tenants binds the grant in a new tenant namespace within seconds."""
ALLOWED_FOR: Final = 300.0
"""Seconds an allowance is remembered (a grant removed meanwhile shows as a failing watch)."""

REVIEWS: Final = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


class WatchAccess:
    """``allowed(resource, namespace)``: may the controller ``list`` and ``watch`` it there ("" = cluster-wide)?"""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._answers: dict[tuple[str, str, str], tuple[bool, float]] = {}

    async def allowed(self, resource: Resource, namespace: str = "", *, fresh: bool = False) -> bool:
        """``fresh``: ask even if an answer is remembered (a grant may just have gone), and remember the new one."""
        key = (resource.api_version, resource.plural, namespace)
        known = self._answers.get(key)
        now = time.monotonic()
        if known is not None and now < known[1] and not fresh:
            return known[0]
        try:
            answer = all([await self._review(resource, namespace, verb) for verb in ("list", "watch")])
        except KubeError:
            return False  # not remembered: asked again next time
        self._answers[key] = (answer, now + (ALLOWED_FOR if answer else DENIED_FOR))
        return answer

    async def _review(self, resource: Resource, namespace: str, verb: str) -> bool:
        attributes = {"group": group_of(resource.api_version), "resource": resource.plural, "verb": verb}
        if namespace:
            attributes["namespace"] = namespace
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        review = await self.kube.create(REVIEWS, body)
        return bool((review.get("status") or {}).get("allowed"))
