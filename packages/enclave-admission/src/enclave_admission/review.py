"""AdmissionReview v1 in and out: the typed request every decision reads, and the Decision it returns.

Decisions are plain values. Area modules never touch HTTP, metrics or the API: they look at an
:class:`AdmissionRequest` and the in-memory state and return a :class:`Decision`, which the server turns into
an AdmissionReview response (with a base64 JSONPatch when the decision mutates). That keeps every rule a pure
function that unit tests can call with hand-built snapshots.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

JSON = dict[str, Any]
REVIEW_API_VERSION: Final = "admission.k8s.io/v1"


class MalformedReviewError(ValueError):
    """The body is not an AdmissionReview v1 request we can decide on."""


def _labels(obj: JSON | None, key: str) -> dict[str, str]:
    if not obj:
        return {}
    meta = obj.get("metadata") or {}
    value = meta.get(key) or {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The fields of ``AdmissionReview.request`` that Enclave decides on."""

    uid: str
    operation: str
    """CREATE, UPDATE, DELETE or CONNECT."""
    group: str
    resource: str
    sub_resource: str
    """``status`` or ``finalize`` for those subresources; empty for the object itself."""
    kind: str
    api_version: str
    name: str
    namespace: str
    username: str
    groups: tuple[str, ...]
    obj: JSON | None
    """The object after the change (None on DELETE)."""
    old: JSON | None
    """The object before the change (None on CREATE)."""
    dry_run: bool = False

    @classmethod
    def from_review(cls, review: Any) -> AdmissionRequest:
        """Parse an AdmissionReview body; raise :class:`MalformedReviewError` on anything unexpected."""
        if not isinstance(review, dict):
            raise MalformedReviewError("body is not a JSON object")
        if review.get("apiVersion") != REVIEW_API_VERSION or review.get("kind") != "AdmissionReview":
            raise MalformedReviewError(
                f"expected apiVersion {REVIEW_API_VERSION} kind AdmissionReview, got "
                f"{review.get('apiVersion')!r} {review.get('kind')!r}"
            )
        request = review.get("request")
        if not isinstance(request, dict) or not request.get("uid"):
            raise MalformedReviewError("request (with a uid) is missing")
        kind = request.get("kind") or {}
        resource = request.get("resource") or {}
        user = request.get("userInfo") or {}
        obj = request.get("object")
        old = request.get("oldObject")
        group = str(kind.get("group") or "")
        version = str(kind.get("version") or "")
        return cls(
            uid=str(request["uid"]),
            operation=str(request.get("operation") or ""),
            group=str(resource.get("group") or ""),
            resource=str(resource.get("resource") or ""),
            sub_resource=str(request.get("subResource") or ""),
            kind=str(kind.get("kind") or ""),
            api_version=f"{group}/{version}" if group else version,
            name=str(request.get("name") or ((obj or old or {}).get("metadata") or {}).get("name") or ""),
            namespace=str(request.get("namespace") or ""),
            username=str(user.get("username") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            obj=obj if isinstance(obj, dict) else None,
            old=old if isinstance(old, dict) else None,
            dry_run=bool(request.get("dryRun")),
        )

    @property
    def labels(self) -> dict[str, str]:
        return _labels(self.obj, "labels")

    @property
    def annotations(self) -> dict[str, str]:
        return _labels(self.obj, "annotations")

    @property
    def old_labels(self) -> dict[str, str]:
        return _labels(self.old, "labels")

    @property
    def old_annotations(self) -> dict[str, str]:
        return _labels(self.old, "annotations")


@dataclass(frozen=True, slots=True)
class Decision:
    """What one webhook answers: allow (maybe with a patch) or deny with a reason and a message."""

    allowed: bool
    reason: str = ""
    """CamelCase reason, used for the deny Event and the decision log (``NamespaceQuotaExceeded``)."""
    message: str = ""
    """For a denial: what was refused and why, in words the user can act on."""
    patch: tuple[JSON, ...] = ()
    """RFC 6902 operations applied by kube-apiserver (mutating webhooks only)."""
    tenant: str = ""
    """The tenant the decision concerns, for the log."""
    reserve: tuple[str, str] | None = None
    """(tenant, namespace) to count toward the tenant's namespace quota until the snapshot shows it."""
    warnings: tuple[str, ...] = field(default=())

    @classmethod
    def allow(cls, reason: str = "Allowed", *, tenant: str = "", reserve: tuple[str, str] | None = None) -> Decision:
        return cls(True, reason, tenant=tenant, reserve=reserve)

    @classmethod
    def deny(cls, reason: str, message: str, *, tenant: str = "") -> Decision:
        return cls(False, reason, message, tenant=tenant)

    @classmethod
    def mutate(cls, reason: str, patch: list[JSON], *, tenant: str = "") -> Decision:
        return cls(True, reason, patch=tuple(patch), tenant=tenant)

    @property
    def result(self) -> str:
        """``allowed``, ``patched`` or ``denied``: the metric label."""
        if not self.allowed:
            return "denied"
        return "patched" if self.patch else "allowed"


def response(uid: str, decision: Decision) -> JSON:
    """The AdmissionReview v1 response body for ``decision``."""
    answer: JSON = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        answer["status"] = {"code": 403, "reason": "Forbidden", "message": decision.message}
    if decision.patch:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = base64.b64encode(orjson.dumps(list(decision.patch))).decode()
    if decision.warnings:
        answer["warnings"] = list(decision.warnings)
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": answer}


def pointer(*parts: str) -> str:
    """A JSON Pointer (RFC 6901) from raw keys: ``pointer("metadata", "labels", "enclave.dev/tenant")``."""
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)
