"""Raw-JSON access to the Kubernetes API over our own :class:`~enclave_core.kube.connection.Connection`.

Controllers here work on plain dicts validated by our own pydantic models, apply with server-side apply, and
stream watches; the generated typed API classes of the ``kubernetes`` package get in the way of all three (they
validate every call and re-model every object), and importing it costs every process ~11 MB
(docs/decisions/0004-kube-client.md). The connection holds address, TLS, credentials and the aiohttp pool; this
module speaks JSON paths on top of it.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from prometheus_client import Counter

from enclave_core.kube.connection import Connection

JSON = dict[str, Any]

FENCED_WRITES = Counter(
    "enclave_kube_fenced_writes_total",
    "Writes of a Lease-fenced client (a controller's): sent to the API, or refused because this replica "
    "does not hold its Lease",
    ["result"],
)
REQUESTS = Counter(
    "enclave_kube_requests_total",
    "Requests this process sent to kube-apiserver, by verb (WATCH for a watch) and resource (plural, with "
    "its subresource): what a controller costs the API, and proof that a steady state costs nothing",
    ["method", "resource"],
)


class KubeError(Exception):
    """A non-2xx answer from kube-apiserver, with its Status message."""

    def __init__(self, status: int, reason: str, message: str, body: JSON | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        """The object or its namespace went away, or the namespace started terminating, while a controller wrote:
        nothing to fix, the next pass knows (kube-apiserver answers a create in a terminating namespace 403)."""
        return self.status == 404 or (self.status == 403 and "being terminated" in self.message)


def with_kind(obj: JSON, api_version: str, kind: str) -> JSON:
    """``obj`` with its ``apiVersion`` and ``kind``: objects of a list carry neither (kube-apiserver states them once
    on the list), and an Event's involvedObject or a server-side apply needs both."""
    return {**obj, "apiVersion": obj.get("apiVersion") or api_version, "kind": obj.get("kind") or kind}


def resource_path(
    api_version: str,
    plural: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """``/api/v1/namespaces/x/pods/y/status`` and friends."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


_REVIEW_APIS = ("/apis/authentication.k8s.io/", "/apis/authorization.k8s.io/")
"""Token and access reviews are POSTed but store nothing: questions, not writes."""


def _writes(method: str, path: str, query: Mapping[str, str | int | bool] | None) -> bool:
    """Whether a request can change stored state (what a Lease fence must stop)."""
    if method in ("GET", "HEAD", "OPTIONS"):
        return False
    if path.startswith(_REVIEW_APIS):
        return False
    return not (query and query.get("dryRun") == "All")


def resource_of(path: str) -> str:
    """``pods/status`` for ``/api/v1/namespaces/x/pods/y/status``: a bounded metric label (names dropped)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    if len(parts) > 2 and parts[0] == "namespaces":
        parts = parts[2:]
    if not parts:
        return ""
    return f"{parts[0]}/{parts[2]}" if len(parts) > 2 else parts[0]


class FencedWriteError(Exception):
    """A write refused before it left the process: this replica does not hold its Lease (or its renew
    deadline passed). Not a ``KubeError``: nothing reached the API, and no handler should answer it with
    another write."""


class Kube:
    """JSON-in, JSON-out calls against kube-apiserver.

    ``fence``, when given, is asked before every write (anything but GET): a controller replica's writes go
    through it so they stop the moment its Lease is no longer safely held (``LeaderElector.may_write``).
    """

    def __init__(self, api: Connection, field_manager: str, *, fence: Callable[[], bool] | None = None) -> None:
        self.api = api
        self.field_manager = field_manager
        self.fence = fence

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str | int | bool] | None = None,
        content_type: str = "application/json",
        request_timeout: float | None = 30.0,
        accept: str = "application/json",
    ) -> JSON:
        url = path
        if query:
            url += "?" + urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()})
        headers = await self._headers(method, path, body, {"Accept": accept, "Content-Type": content_type})
        if self.fence is not None and _writes(method, path, query):
            if not self.fence():
                FENCED_WRITES.labels("refused").inc()
                raise FencedWriteError(f"{method} {path}: this replica does not hold its Lease")
            FENCED_WRITES.labels("sent").inc()
        REQUESTS.labels(method, resource_of(path)).inc()
        payload_bytes = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        response = await self.api.request(method, url, headers=headers, body=payload_bytes, timeout=request_timeout)
        try:
            data = await response.read()
        finally:
            response.release()
        payload: JSON = json.loads(data) if data else {}
        if response.status >= 400:
            raise KubeError(response.status, payload.get("reason", ""), payload.get("message", str(data)), payload)
        return payload

    async def _headers(self, method: str, path: str, body: Any, headers: dict[str, str]) -> dict[str, str]:
        """Add the connection's credentials (a bearer token, re-read as a pod's token rotates, or basic auth);
        client certificates authenticate in the TLS layer and need nothing here. Subclasses add headers
        (replication's ``Impersonate-User``)."""
        return {**headers, **await self.api.headers()}

    async def get(self, path: str) -> JSON:
        return await self.request("GET", path)

    async def get_or_none(self, path: str) -> JSON | None:
        try:
            return await self.get(path)
        except KubeError as err:
            if err.not_found:
                return None
            raise

    async def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> JSON:
        """One list request; with ``limit``, one page (``metadata.continue`` names the next)."""
        query: dict[str, str | int | bool] = {"labelSelector": label_selector} if label_selector else {}
        if field_selector:
            query["fieldSelector"] = field_selector
        if limit:
            query["limit"] = limit
        if continue_token:
            query["continue"] = continue_token
        return await self.request("GET", path, query=query or None)

    async def create(self, path: str, body: JSON) -> JSON:
        return await self.request("POST", path, body=body, query={"fieldManager": self.field_manager})

    async def replace(self, path: str, body: JSON) -> JSON:
        return await self.request("PUT", path, body=body, query={"fieldManager": self.field_manager})

    async def apply(self, path: str, body: JSON, *, force: bool = True) -> JSON:
        """Server-side apply: we state the fields we own; fields others own stay theirs."""
        return await self.request(
            "PATCH",
            path,
            body=body,
            query={"fieldManager": self.field_manager, "force": force},
            content_type="application/apply-patch+yaml",
        )

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        return await self._patch(path, patch, "application/merge-patch+json")

    async def json_patch(self, path: str, operations: builtins.list[JSON]) -> JSON:
        """RFC 6902 patch: the one way to remove a single list item (with a ``test`` guarding the rest)."""
        return await self._patch(path, operations, "application/json-patch+json")

    async def _patch(self, path: str, body: Any, content_type: str) -> JSON:
        """A patch whose fields are recorded as ours (without ``fieldManager`` kube-apiserver names the manager
        after the HTTP client: ``Python`` owned every status we wrote)."""
        return await self.request(
            "PATCH", path, body=body, query={"fieldManager": self.field_manager}, content_type=content_type
        )

    async def delete(self, path: str, *, missing_ok: bool = True) -> None:
        try:
            await self.request("DELETE", path)
        except KubeError as err:
            if not (missing_ok and err.not_found):
                raise

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[JSON]:
        """Watch events from ``resource_version`` on; ends when the server closes the stream."""
        query: dict[str, str | int | bool] = {
            "watch": True,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": timeout_seconds,
        }
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        url = path + "?" + urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()})
        headers = await self._headers("GET", path, None, {"Accept": "application/json"})
        REQUESTS.labels("WATCH", resource_of(path)).inc()
        raw = await self.api.request("GET", url, headers=headers, timeout=timeout_seconds + 30)
        try:
            if raw.status >= 400:
                data = await raw.read()
                payload = json.loads(data) if data else {}
                raise KubeError(raw.status, payload.get("reason", ""), payload.get("message", ""), payload)
            while True:
                line = await raw.content.readline()
                if not line:
                    return
                yield json.loads(line)
        finally:
            raw.release()
