"""Who is calling, and how that identity travels to kube-apiserver.

The proxy authenticates the caller as kube-apiserver would, then sends every request upstream with its own
credentials plus impersonation headers naming the caller: kube-apiserver authorizes the caller's identity, so
the caller gets its own rights and never the proxy's (the proxy's account may only impersonate, review tokens
and read namespaces).

- Client certificate (when the proxy is given the client CA): the subject's CN is the user, each O a group,
  as kube-apiserver's x509 authenticator reads them. Checked first, as kube-apiserver does.
- Bearer token: a TokenReview says who it belongs to (users, groups, uid, extra). Answers are cached for a few
  seconds keyed by a SHA-256 of the token (the token itself is never kept), so a burst of kubectl requests
  costs one review; concurrent first uses of one token share the review in flight.

A caller that sends ``Impersonate-*`` headers is refused outright (403) in this version: honouring them only
as far as kube-apiserver lets the caller impersonate needs a SubjectAccessReview per header (docs/proxy.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from multidict import CIMultiDict

from enclave_core.kube.rest import Kube

log = logging.getLogger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
MAX_CACHED = 10_000
"""Tokens remembered at most; past that the cache starts over (a flood of distinct tokens cannot grow it)."""
MAX_TOKEN = 16 * 1024
"""Longer bearer tokens are refused without a review (OIDC id tokens are a few KiB)."""


@dataclass(frozen=True)
class Identity:
    """An authenticated caller, as kube-apiserver's ``user.Info``."""

    user: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    via: str = "token"
    """``token`` or ``certificate``: how the proxy authenticated the caller (logs and metrics)."""


class AuthenticationUnavailableError(Exception):
    """The TokenReview could not be made (kube-apiserver unreachable or refusing the proxy): answer 503, not 401."""


def from_certificate(peer: dict[str, Any] | None) -> Identity | None:
    """The identity of a verified client certificate (``ssl.SSLObject.getpeercert()``): CN user, O groups."""
    if not peer:
        return None
    user = ""
    groups: list[str] = []
    for rdn in peer.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                user = str(value)
            elif key == "organizationName":
                groups.append(str(value))
    if not user:
        return None
    return Identity(user=user, groups=(*groups, "system:authenticated"), via="certificate")


def bearer_token(authorization: str) -> str | None:
    """The token of an ``Authorization: Bearer`` header (scheme case-insensitive), None otherwise."""
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN:
        return None
    return token


def _identity_from_review(status: dict[str, Any]) -> Identity | None:
    if not status.get("authenticated"):
        return None
    user = status.get("user") or {}
    name = str(user.get("username") or "")
    if not name:
        return None
    extra = tuple(
        sorted((str(key), tuple(str(v) for v in values or ())) for key, values in (user.get("extra") or {}).items())
    )
    return Identity(
        user=name,
        groups=tuple(str(group) for group in user.get("groups") or ()),
        uid=str(user.get("uid") or ""),
        extra=extra,
    )


@dataclass
class TokenReviewer:
    """Bearer tokens to identities through the TokenReview API, cached for ``ttl`` seconds (``negative_ttl``
    for a token kube-apiserver rejected, so a client retrying a bad token does not cost a review each time)."""

    kube: Kube
    ttl: float = 10.0
    negative_ttl: float = 2.0
    audiences: tuple[str, ...] = ()
    clock: Callable[[], float] = time.monotonic
    _cache: dict[bytes, tuple[float, Identity | None]] = field(default_factory=dict)
    _inflight: dict[bytes, asyncio.Future[Identity | None]] = field(default_factory=dict)

    async def review(self, token: str) -> Identity | None:
        key = hashlib.sha256(token.encode()).digest()
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Identity | None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            identity = await self._ask(token)
        except BaseException as err:
            future.set_exception(err)
            future.exception()  # retrieved: waiters re-raise it, an unwatched future logs nothing
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(identity)
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()
        self._cache[key] = (self.clock() + (self.ttl if identity else self.negative_ttl), identity)
        return identity

    async def _ask(self, token: str) -> Identity | None:
        spec: dict[str, Any] = {"token": token}
        if self.audiences:
            spec["audiences"] = list(self.audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        try:
            answer = await self.kube.create(TOKEN_REVIEWS, body)
        except Exception as err:  # KubeError, aiohttp's client errors, timeouts: none of them says "bad token"
            log.warning("token review failed", extra={"error": str(err)})
            raise AuthenticationUnavailableError(str(err)) from err
        return _identity_from_review(answer.get("status") or {})


def impersonation_headers(identity: Identity) -> CIMultiDict[str]:
    """The ``Impersonate-*`` headers that make kube-apiserver act as ``identity``.

    Groups and extra values repeat their header once per value (kube-apiserver reads every occurrence); an
    extra's key is percent-encoded into the header name, as kube-apiserver decodes it (``/`` is not allowed
    in a header name, and keys such as ``authentication.kubernetes.io/credential-id`` carry one).
    """
    headers: CIMultiDict[str] = CIMultiDict()
    headers["Impersonate-User"] = identity.user
    if identity.uid:
        headers["Impersonate-Uid"] = identity.uid
    for group in identity.groups:
        headers.add("Impersonate-Group", group)
    for key, values in identity.extra:
        name = "Impersonate-Extra-" + quote(key, safe="")
        for value in values:
            headers.add(name, value)
    return headers


def impersonating(names: Iterable[str]) -> list[str]:
    """The caller's own ``Impersonate-*`` headers (refused: see the module's docstring)."""
    return sorted({name for name in names if name.lower().startswith("impersonate-")})
