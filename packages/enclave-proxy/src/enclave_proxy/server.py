"""The HTTPS listener: authenticate, then answer from memory or pass through, in that order.

1. The caller is authenticated: a verified client certificate, else a bearer token through TokenReview.
   Neither: 401, as kube-apiserver answers an anonymous request it does not allow.
2. ``Impersonate-*`` headers the caller sends make it act as the identity they name only when
   SubjectAccessReviews about the caller say it may impersonate every part of it (403 otherwise): the proxy's
   own account may impersonate anyone, and that right must never stand in for the caller's.
3. ``GET /api/v1/namespaces`` and ``GET /api/v1/nodes`` (list or watch) by a tenant user are answered from
   memory (:mod:`enclave_proxy.listing`).
4. Everything else goes to kube-apiserver as the caller (:mod:`enclave_proxy.forward`).
"""

from __future__ import annotations

import datetime
import logging
import ssl
import time
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import Counter, Histogram

from enclave_proxy.forward import MAX_BODY, Upstream
from enclave_proxy.identity import (
    AuthenticationUnavailableError,
    Identity,
    ImpersonationRefusedError,
    ImpersonationReviewer,
    TokenReviewer,
    bearer_token,
    from_certificate,
    impersonating,
    impersonation_headers,
    requested_identity,
)
from enclave_proxy.listing import ClusterIndex, list_body, serve_watch
from enclave_proxy.query import SelectorError, selection
from enclave_proxy.tables import accepts_json, wants_table
from enclave_proxy.visibility import Scope, Visibility

log = logging.getLogger(__name__)

REQUESTS = Counter(
    "enclave_proxy_requests_total",
    "Requests by how the proxy handled them (forwarded, upgraded, filtered, refused) and the answer's code",
    ["route", "code"],
)
FILTERED_SECONDS = Histogram(
    "enclave_proxy_filtered_seconds",
    "Seconds to answer a tenant user's list (namespaces, nodes) from memory",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25),
)


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
        self.routes = {path: index for index in indexes for path in index.kind.paths}

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, handler_args={"max_field_size": 65536})
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def authenticate(self, request: web.Request) -> Identity | None:
        transport = request.transport
        peer: dict[str, Any] | None = None
        if transport is not None:
            ssl_object = transport.get_extra_info("ssl_object")
            if isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
                peer = ssl_object.getpeercert()
        identity = from_certificate(peer)
        if identity is not None:
            return identity
        token = bearer_token(request.headers.get("Authorization", ""))
        if token is None:
            return None
        return await self.reviewer.review(token)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        route, response = await self._route(request)
        REQUESTS.labels(route, str(response.status)).inc()
        return response

    async def _route(self, request: web.Request) -> tuple[str, web.StreamResponse]:
        try:
            identity = await self.authenticate(request)
            if identity is not None and impersonating(request.headers.keys()):
                wanted = requested_identity(request.headers)
                if wanted is not None:
                    identity = await self.impersonation.allowed(identity, wanted)
        except AuthenticationUnavailableError:
            return "refused", status(503, "ServiceUnavailable", "enclave-proxy cannot review the request now; retry")
        except ImpersonationRefusedError as err:
            return "refused", status(err.code, "Forbidden" if err.code == 403 else "BadRequest", str(err))
        if identity is None:
            return "refused", status(401, "Unauthorized", "Unauthorized")
        index = self.routes.get(request.path) if request.method == "GET" else None
        if index is not None and self.visibility.scope(index.kind.name, identity.user, identity.groups) is not None:
            return "filtered", await self._list(request, identity, index)
        headers = impersonation_headers(identity)
        if request.headers.get("Upgrade"):
            return "upgraded", await self.upstream.upgrade(request, headers)
        return "forwarded", await self.upstream.forward(request, headers)

    async def _list(self, request: web.Request, identity: Identity, index: ClusterIndex) -> web.StreamResponse:
        kind = index.kind
        query = request.query
        try:
            chosen = selection(query, kind.fields)
        except SelectorError as err:
            return status(400, "BadRequest", str(err))
        accept = request.headers.get("Accept", "")
        table = wants_table(accept)
        if table is None and not accepts_json(accept):
            return status(406, "NotAcceptable", "enclave-proxy answers tenant users' lists in JSON only")
        if not index.synced.is_set():
            return status(503, "ServiceUnavailable", f"enclave-proxy has not listed {kind.resource} yet; retry")

        def allowed() -> Scope | None:
            return self.visibility.scope(kind.name, identity.user, identity.groups)

        if request.path == kind.paths[1] or query.get("watch") in ("true", "1"):
            return await serve_watch(request, index, allowed, chosen, table)
        started = time.perf_counter()
        objects = index.visible(allowed() or Scope(), chosen)
        try:
            body = list_body(
                kind,
                objects,
                query,
                as_table=table,
                resource_version=index.informer.resource_version,
                now=datetime.datetime.now(datetime.UTC),
            )
        except ValueError as err:
            return status(400, "BadRequest", str(err))
        FILTERED_SECONDS.observe(time.perf_counter() - started)
        return web.Response(body=orjson.dumps(body), content_type="application/json")
