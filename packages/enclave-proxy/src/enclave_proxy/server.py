"""The HTTPS listener: authenticate, then answer from memory or pass through, in that order.

1. The caller is authenticated: a verified client certificate, else a bearer token through TokenReview.
   Neither: 401, as kube-apiserver answers an anonymous request it does not allow.
2. ``Impersonate-*`` headers the caller sends make it act as the identity they name only when
   SubjectAccessReviews about the caller say it may impersonate every part of it (403 otherwise): the proxy's
   own account may impersonate anyone, and that right must never stand in for the caller's.
3. A tenant user's list, watch or get of a kind the proxy filters (namespaces, nodes, PersistentVolumes and the
   storage, ingress, priority, runtime and gateway classes) is answered from memory
   (:mod:`enclave_proxy.listing`) when its tenants' settings grant the verb (:mod:`enclave_proxy.visibility`).
   A get of an object it may not see is passed through as the caller, so kube-apiserver answers exactly what it
   would without the proxy (its 403 says nothing of whether the object exists).
4. An update, patch or delete of one object an administrator's ``spec.proxy`` grants, on an object the caller
   sees, is forwarded as the caller plus the group ``enclave.dev:proxy:<resource>:<verb>``: kube-apiserver then
   authorizes it by whatever the administrator bound to that group, never by the proxy's own rights.
5. Everything else goes to kube-apiserver as the caller (:mod:`enclave_proxy.forward`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from typing import Any

import orjson
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from prometheus_client import Counter, Histogram

from enclave_proxy.forward import MAX_BODY, Upstream
from enclave_proxy.identity import (
    AuthenticationUnavailableError,
    Identity,
    ImpersonationRefusedError,
    ImpersonationReviewer,
    TokenReviewer,
    asks_impersonation,
    bearer_token,
    from_certificate,
    impersonation_headers,
    requested_identity,
)
from enclave_proxy.listing import ClusterIndex, ListVersionError, list_body, serve_watch
from enclave_proxy.query import SelectorError, selection
from enclave_proxy.tables import accepts_json, table, wants_table
from enclave_proxy.visibility import Scope, Visibility

log = logging.getLogger(__name__)

REQUESTS = Counter(
    "enclave_proxy_requests_total",
    "Requests by how the proxy handled them (forwarded, upgraded, filtered, granted, refused) and the answer's code",
    ["route", "code"],
)
FILTERED_SECONDS = Histogram(
    "enclave_proxy_filtered_seconds",
    "Seconds to answer a tenant user's list or get of a filtered kind from memory",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25),
)


GRANT_GROUP = "enclave.dev:proxy:{resource}:{verb}"
"""The group a granted update, patch or delete is forwarded with (docs/proxy.md: the administrator binds it)."""
WRITE_VERBS = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def request_verb(method: str, name: str, watch_path: bool, query: Any) -> str:
    """The verb of a request on a filtered kind's path (kube-apiserver's), empty for one the proxy never answers
    (a create, a deletecollection)."""
    if watch_path:
        return "watch" if method == "GET" else ""
    if method == "GET":
        if name:
            return "get"
        return "watch" if query.get("watch") in ("true", "1") else "list"
    return WRITE_VERBS.get(method, "") if name else ""


def status(code: int, reason: str, message: str) -> web.Response:
    """A ``meta/v1`` Status, the body kubectl prints for an error."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return web.Response(status=code, body=orjson.dumps(body), content_type="application/json")


class ProxyServer:
    """The request handler and the state it decides from."""

    def __init__(
        self,
        upstream: Upstream,
        reviewer: TokenReviewer,
        impersonation: ImpersonationReviewer,
        visibility: Visibility,
        indexes: list[ClusterIndex],
    ) -> None:
        self.upstream = upstream
        self.reviewer = reviewer
        self.impersonation = impersonation
        self.visibility = visibility
        self.lists = {index.kind.paths[0]: index for index in indexes}
        self.watches = {index.kind.paths[1]: index for index in indexes}
        self._counters: dict[tuple[str, int], Any] = {}

    def target(self, path: str) -> tuple[ClusterIndex, str, bool] | None:
        """The filtered kind a path names, the object's name (empty for the collection) and whether it is the
        deprecated ``/watch/`` path; None for any other path (subresources included)."""
        if path in self.lists:
            return self.lists[path], "", False
        if path in self.watches:
            return self.watches[path], "", True
        parent, _, name = path.rpartition("/")
        index = self.lists.get(parent)
        if index is not None and name:
            return index, name, False
        return None

    def server(self) -> web.Server:
        """aiohttp's low-level server with :meth:`handle` for every request: the proxy routes by itself, so an
        Application's router, middleware chain and match info would be work per request for nothing."""
        return web.Server(self.handle, request_factory=self._request, access_log=None, max_field_size=65536)

    def _request(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        """Requests whose bodies may be as large as :data:`MAX_BODY` (aiohttp's default is 1 MiB)."""
        loop = asyncio.get_running_loop()
        return web.BaseRequest(message, payload, protocol, writer, task, loop, client_max_size=MAX_BODY)

    async def authenticate(self, request: web.BaseRequest) -> Identity | None:
        transport = request.transport
        # the verified certificate as the handshake left it (asyncio and uvloop keep getpeercert()'s answer)
        peer = transport.get_extra_info("peercert") if transport is not None else None
        identity = from_certificate(peer if isinstance(peer, dict) else None)
        if identity is not None:
            return identity
        token = bearer_token(request.headers.get("Authorization", ""))
        if token is None:
            return None
        return await self.reviewer.review(token)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.headers.get("Expect", "").lower() == "100-continue":  # as an Application would answer it
            await request.writer.write(b"HTTP/%d.%d 100 Continue\r\n\r\n" % request.version)
        route, response = await self._route(request)
        counter = self._counters.get((route, response.status))
        if counter is None:  # labels() takes a lock and builds a key: once per (route, code), not per request
            counter = self._counters[(route, response.status)] = REQUESTS.labels(route, str(response.status))
        counter.inc()
        return response

    async def _route(self, request: web.BaseRequest) -> tuple[str, web.StreamResponse]:
        try:
            identity = await self.authenticate(request)
            if identity is not None and asks_impersonation(request.raw_headers):
                wanted = requested_identity(request.headers)
                if wanted is not None:
                    identity = await self.impersonation.allowed(identity, wanted)
        except AuthenticationUnavailableError:
            return "refused", status(503, "ServiceUnavailable", "enclave-proxy cannot review the request now; retry")
        except ImpersonationRefusedError as err:
            return "refused", status(err.code, "Forbidden" if err.code == 403 else "BadRequest", str(err))
        if identity is None:
            return "refused", status(401, "Unauthorized", "Unauthorized")
        target = self.target(request.path)
        if target is not None:
            index, name, watch_path = target
            verb = request_verb(request.method, name, watch_path, request.query)
            kind = index.kind
            scope = self.visibility.scope(kind.setting or kind.name, identity.user, identity.groups, verb)
            if verb and scope is not None:
                if not index.synced.is_set() and kind.required:
                    return "refused", status(
                        503, "ServiceUnavailable", f"enclave-proxy has not listed {kind.resource} yet; retry"
                    )
                if index.synced.is_set() and verb in ("list", "watch"):
                    return "filtered", await self._list(request, identity, index, verb)
                obj = index.item(name) if name and index.synced.is_set() else None
                if obj is not None and scope.admits(obj):
                    if verb == "get":
                        return "filtered", self._get(request, index, obj)
                    group = GRANT_GROUP.format(resource=kind.resource, verb=verb)
                    granted = dataclasses.replace(identity, groups=(*identity.groups, group))
                    return "granted", await self.upstream.forward(request, granted)
        if request.headers.get("Upgrade"):
            return "upgraded", await self.upstream.upgrade(request, impersonation_headers(identity))
        return "forwarded", await self.upstream.forward(request, identity)

    def _get(self, request: web.BaseRequest, index: ClusterIndex, obj: dict[str, Any]) -> web.Response:
        """One object the caller sees, as kube-apiserver renders it (JSON, or the Table kubectl asks for)."""
        kind = index.kind
        accept = request.headers.get("Accept", "")
        as_table = wants_table(accept)
        if as_table is None and not accepts_json(accept):
            return status(406, "NotAcceptable", "enclave-proxy answers tenant users in JSON only")
        typed = kind.typed(obj)
        body: dict[str, Any] = typed
        if as_table is not None:
            body = table(
                kind.table,
                [typed],
                version=as_table,
                include=request.query.get("includeObject", "Metadata"),
                now=datetime.datetime.now(datetime.UTC),
                resource_version=str((typed.get("metadata") or {}).get("resourceVersion") or ""),
            )
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def _list(
        self, request: web.BaseRequest, identity: Identity, index: ClusterIndex, verb: str
    ) -> web.StreamResponse:
        kind = index.kind
        query = request.query
        try:
            chosen = selection(query, kind.fields)
        except SelectorError as err:
            return status(400, "BadRequest", str(err))
        accept = request.headers.get("Accept", "")
        as_table = wants_table(accept)
        if as_table is None and not accepts_json(accept):
            return status(406, "NotAcceptable", "enclave-proxy answers tenant users' lists in JSON only")

        def allowed() -> Scope | None:
            return self.visibility.scope(kind.setting or kind.name, identity.user, identity.groups, verb)

        if verb == "watch":
            return await serve_watch(request, index, allowed, chosen, as_table)
        try:
            state, version = await index.list_state(query)
        except ListVersionError as err:
            return status(err.code, err.reason, str(err))
        started = time.perf_counter()
        objects = index.visible(allowed() or Scope(), chosen, state)
        try:
            body = list_body(
                kind,
                objects,
                query,
                as_table=as_table,
                resource_version=version,
                now=datetime.datetime.now(datetime.UTC),
            )
        except ValueError as err:
            return status(400, "BadRequest", str(err))
        FILTERED_SECONDS.observe(time.perf_counter() - started)
        return web.Response(body=orjson.dumps(body), content_type="application/json")
