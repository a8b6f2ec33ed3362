"""Acting as someone: the API client replication writes and reads through, and the reads the plan makes.

Every write, and every read of sources and context objects, of a replication object goes through an
:class:`ActingKube`: the controller's own connection, with ``Impersonate-User`` set to the acting service
account when there is one (kube-apiserver then adds the account's groups itself), and the resource's own
field manager. The controller therefore needs ``impersonate`` on service accounts, and what a tenant's
TenantResource can do is bounded by what its service account may do.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from enclave_core import selectors
from enclave_core.kube.connection import Connection
from enclave_core.kube.rest import JSON, Kube, KubeError
from enclave_replication.discovery import Discovery, Resource
from enclave_replication.plan import ReadError


class ActingKube(Kube):
    """A :class:`Kube` that impersonates ``user`` (None: the controller itself); its writes are fenced by the
    Lease like the controller's own."""

    def __init__(self, base: Kube, field_manager: str, user: str | None, api: Connection | None = None) -> None:
        super().__init__(api or base.api, field_manager, fence=base.fence)
        self.user = user

    async def _headers(self, method: str, path: str, body: Any, headers: dict[str, str]) -> dict[str, str]:
        headers = await super()._headers(method, path, body, headers)
        if self.user:
            headers["Impersonate-User"] = self.user
        return headers

    @property
    def who(self) -> str:
        return self.user or "the replication controller"

    async def apply_object(self, path: str, body: JSON, *, force: bool, dry_run: bool = False) -> JSON:
        query: dict[str, str | int | bool] = {"fieldManager": self.field_manager, "force": force}
        if dry_run:
            query["dryRun"] = "All"
        return await self.request("PATCH", path, body=body, query=query, content_type="application/apply-patch+yaml")

    async def delete_object(self, path: str, *, dry_run: bool = False) -> None:
        try:
            await self.request("DELETE", path, query={"dryRun": "All"} if dry_run else None)
        except KubeError as err:
            if not err.not_found:
                raise


def endpoint_client(base: Connection, endpoint: str, ca_pem: str | None, skip_verify: bool) -> Connection:
    """A connection to ``impersonation.endpoint``: the controller's own credentials, another address, the CA
    from ``impersonation.caSecret*`` (or the controller's), TLS verification off only with ``skipTlsVerify``."""
    return base.with_address(endpoint, ca=ca_pem.encode() if ca_pem else None, verify=not skip_verify)


class ClusterReader:
    """The plan's :class:`~enclave_replication.plan.Reader`: discovery as the controller, reads as the actor.

    ``interest`` collects the collections read, so the controller can watch them and reconcile on change.
    """

    def __init__(self, discovery: Discovery, kube: ActingKube) -> None:
        self.discovery = discovery
        self.kube = kube
        self.interest: set[str] = set()
        self.scopes: dict[str, tuple[Resource, str]] = {}
        """Collection read -> (its resource, its namespace or ""): what the controller asks before watching it."""

    async def namespaced(self, api_version: str, kind: str) -> bool:
        return (await self.discovery.resource(api_version, kind)).namespaced

    async def kinds(self, api_version: str) -> list[str]:
        return [resource.kind for resource in await self.discovery.listable(api_version)]

    async def read(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str | None,
        selector: selectors.LabelSelector | None,
    ) -> list[JSON]:
        resource = await self.discovery.resource(api_version, kind)
        collection = resource.collection(namespace)
        self.interest.add(collection)
        self.scopes[collection] = (resource, namespace if resource.namespaced else "")
        where = f"{namespace}/{name}" if namespace and name else (name or f"namespace {namespace or '(cluster)'}")
        try:
            if name:
                found = await self.kube.get(f"{collection}/{quote(name, safe='')}")
                return [found]
            listing = await self.kube.list(collection, label_selector=selectors.to_label_query(selector) or None)
        except KubeError as err:
            if err.not_found:
                return []
            if err.status == 403:
                raise ReadError("Forbidden", f"{self.kube.who} may not read {kind} in {where}: {err.message}") from err
            raise ReadError("ReadFailed", f"reading {kind} in {where}: {err}") from err
        items = listing.get("items") or []
        return [{"apiVersion": api_version, "kind": kind, **item} for item in items]
