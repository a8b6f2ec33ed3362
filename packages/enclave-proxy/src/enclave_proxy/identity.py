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

A caller that sends ``Impersonate-*`` headers acts as the identity they name only when SubjectAccessReviews
asked about the caller itself say it may impersonate each part of it (:class:`ImpersonationReviewer`), as
kube-apiserver would decide; the proxy's own right to impersonate never stands in for the caller's.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from multidict import CIMultiDict, CIMultiDictProxy

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
    """``token``, ``certificate`` or ``impersonation``: how the proxy came by this identity (logs and metrics)."""


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


def asks_impersonation(raw_headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether the caller sent any ``Impersonate-*`` header: the check every request pays, on the raw header
    names, before the few that do are read in full (:func:`requested_identity`)."""
    return any(name[:12].lower() == b"impersonate-" for name, _ in raw_headers)


SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


class ImpersonationRefusedError(Exception):
    """The caller asked to act as someone it may not impersonate (403), or asked malformedly (400)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Impersonation:
    """What a caller's ``Impersonate-*`` headers ask for: the identity, and the ``impersonate`` checks
    kube-apiserver would make for exactly the headers sent (groups it adds itself are not checked)."""

    identity: Identity
    checks: tuple[tuple[tuple[str, str], ...], ...]


def requested_identity(headers: Mapping[str, str] | CIMultiDictProxy[str]) -> Impersonation | None:
    """The identity a caller's ``Impersonate-*`` headers ask for, as kube-apiserver builds it (None: none asked).

    Groups default to none besides ``system:authenticated`` (and, for a ServiceAccount, its two groups); extra
    keys are read from the header name, percent-decoded and lower-cased, as kube-apiserver reads them."""
    multi = headers if isinstance(headers, CIMultiDictProxy) else CIMultiDictProxy(CIMultiDict(headers))
    user = multi.get("Impersonate-User", "")
    asked = list(multi.getall("Impersonate-Group", []))
    uid = multi.get("Impersonate-Uid", "")
    extra: dict[str, list[str]] = {}
    for name, value in multi.items():
        if name.lower().startswith("impersonate-extra-"):
            extra.setdefault(unquote(name[len("impersonate-extra-") :]).lower(), []).append(value)
    if not user:
        if asked or uid or extra:
            raise ImpersonationRefusedError(400, "Impersonate-Group, -Uid and -Extra-* need Impersonate-User")
        return None
    checks: list[dict[str, str]] = []
    groups = list(asked)
    if user.startswith(SERVICE_ACCOUNT_PREFIX) and user.count(":") == 3:
        namespace, _, name = user[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
        checks.append({"namespace": namespace, "resource": "serviceaccounts", "name": name})
        if not asked:
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    else:
        checks.append({"resource": "users", "name": user})
    checks += [{"resource": "groups", "name": group} for group in asked]
    if uid:
        checks.append({"group": "authentication.k8s.io", "resource": "uids", "name": uid})
    for key, values in extra.items():
        for value in values:
            checks.append(
                {"group": "authentication.k8s.io", "resource": "userextras", "subresource": key, "name": value}
            )
    if user != "system:anonymous" and "system:authenticated" not in groups:
        groups.append("system:authenticated")
    identity = Identity(
        user=user,
        groups=tuple(groups),
        uid=uid,
        extra=tuple(sorted((key, tuple(values)) for key, values in extra.items())),
        via="impersonation",
    )
    return Impersonation(identity, tuple(tuple(sorted({**c, "verb": "impersonate"}.items())) for c in checks))


@dataclass
class ImpersonationReviewer:
    """Whether a caller may act as the identity its ``Impersonate-*`` headers name: one SubjectAccessReview per
    part (user or service account, each group, uid, each extra value), asked *about the caller*, so the caller's
    own right decides and never the proxy's. Answers are cached for ``ttl`` seconds per (caller, part)."""

    kube: Kube
    ttl: float = 10.0
    clock: Callable[[], float] = time.monotonic
    _cache: dict[tuple[Identity, tuple[tuple[str, str], ...]], tuple[float, bool]] = field(default_factory=dict)

    async def allowed(self, caller: Identity, wanted: Impersonation) -> Identity:
        """The identity ``wanted`` names when ``caller`` may impersonate every part asked for; raises
        ImpersonationRefusedError (403) naming the first part it may not."""
        for check in wanted.checks:
            attributes = dict(check)
            if not await self._check(caller, attributes):
                what = attributes.get("subresource") or attributes["resource"]
                raise ImpersonationRefusedError(
                    403, f'{caller.user} may not impersonate {what} "{attributes["name"]}" (kube-apiserver\'s RBAC)'
                )
        return wanted.identity

    async def _check(self, caller: Identity, attributes: dict[str, str]) -> bool:
        key = (caller, tuple(sorted(attributes.items())))
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        spec: dict[str, Any] = {"user": caller.user, "groups": list(caller.groups), "resourceAttributes": attributes}
        if caller.uid:
            spec["uid"] = caller.uid
        if caller.extra:
            spec["extra"] = {extra_key: list(values) for extra_key, values in caller.extra}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        try:
            answer = await self.kube.create(SUBJECT_ACCESS_REVIEWS, body)
        except Exception as err:  # kube-apiserver away or the proxy's right missing: not a "no"
            log.warning("subject access review failed", extra={"error": str(err)})
            raise AuthenticationUnavailableError(str(err)) from err
        allowed = bool((answer.get("status") or {}).get("allowed"))
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()
        self._cache[key] = (self.clock() + self.ttl, allowed)
        return allowed
