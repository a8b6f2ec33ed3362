"""Who a replication object acts as, and the client it acts through.

A GlobalTenantResource acts as the controller or as a service account; a TenantResource always as a service
account of its own tenant (never with the controller's rights). The account may be named in the spec or defaulted
by the ServiceConfiguration's ``impersonation``, whose optional ``endpoint`` is a separate API server (an
impersonating proxy) reached with a CA read from a Secret. This module decides the identity and builds that
client; :mod:`enclave_replication.acting` makes the requests as it.

``Identities`` is a base of :class:`enclave_replication.controller.ReplicationController`.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass

from enclave_core.api.names import TENANT_LABEL
from enclave_core.api.replication import ServiceAccountRef, TenantResourceSpec
from enclave_core.kube.connection import Connection
from enclave_core.kube.rest import KubeError
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX
from enclave_replication.acting import endpoint_client
from enclave_replication.names import Owner
from enclave_replication.watches import Watches

log = logging.getLogger(__name__)


@dataclass
class Identity:
    """Who a replication object acts as: a service account (username set) or the controller (None)."""

    user: str | None
    account: ServiceAccountRef | None
    problem: str = ""
    reason: str = "NoServiceAccount"


class Identities(Watches):
    """The acting identity of each replication object, and the controller's own."""

    _endpoint_client: tuple[tuple[str, str, str, str, bool], Connection] | None

    async def _whoami(self) -> str:
        """The controller's own username (admission always lets it through), from a SelfSubjectReview."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            review = await self.kube.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", body)
        except KubeError as err:
            log.warning("could not learn the controller's username", extra={"error": str(err)})
            return ""
        return str(review.get("status", {}).get("userInfo", {}).get("username", ""))

    async def _endpoint(self, identity: Identity) -> Connection | None:
        """The client for ``impersonation.endpoint`` when one is configured and a service account acts; built
        once per configuration (the CA Secret is read then), closed when the configuration changes."""
        impersonation = self.config.spec.impersonation if self.config else None
        if identity.user is None or impersonation is None or not impersonation.endpoint:
            return None
        key = (
            impersonation.endpoint,
            impersonation.ca_secret_namespace or "",
            impersonation.ca_secret_name or "",
            impersonation.ca_secret_key,
            impersonation.skip_tls_verify,
        )
        if self._endpoint_client is not None and self._endpoint_client[0] == key:
            return self._endpoint_client[1]
        ca_pem: str | None = None
        if impersonation.ca_secret_name:
            namespace = impersonation.ca_secret_namespace or self.events_namespace
            path = f"/api/v1/namespaces/{namespace}/secrets/{impersonation.ca_secret_name}"
            secret = await self.kube.get_or_none(path)
            data = (secret or {}).get("data") or {}
            if impersonation.ca_secret_key in data:
                ca_pem = base64.b64decode(data[impersonation.ca_secret_key]).decode()
            else:
                log.warning(
                    "impersonation CA not found", extra={"secret": f"{namespace}/{impersonation.ca_secret_name}"}
                )
        if self._endpoint_client is not None:
            await self._endpoint_client[1].close()
        api = endpoint_client(self.kube.api, impersonation.endpoint, ca_pem, impersonation.skip_tls_verify)
        self._endpoint_client = (key, api)
        return api

    def _identity(self, owner: Owner, spec: TenantResourceSpec) -> Identity:
        account = spec.service_account
        impersonation = self.config.spec.impersonation if self.config else None
        if account is None and impersonation is not None:
            if owner.kind == "GlobalTenantResource" and impersonation.global_default_service_account:
                account = ServiceAccountRef(
                    name=impersonation.global_default_service_account,
                    namespace=impersonation.global_default_service_account_namespace or "default",
                )
            elif owner.kind == "TenantResource" and impersonation.tenant_default_service_account:
                account = ServiceAccountRef(
                    name=impersonation.tenant_default_service_account, namespace=owner.namespace
                )
        if account is None:
            if owner.kind == "TenantResource":
                return Identity(
                    None,
                    None,
                    "a TenantResource acts as a service account: set spec.serviceAccount, or "
                    "impersonation.tenantDefaultServiceAccount in the ServiceConfiguration",
                )
            return Identity(None, None)
        if owner.kind == "TenantResource" and account.namespace != owner.namespace:
            tenant = self._tenant_of(owner.namespace)
            if not tenant or self._tenant_of(account.namespace) != tenant:
                return Identity(
                    None,
                    account,
                    f"spec.serviceAccount {account.namespace}/{account.name} is outside this TenantResource's tenant",
                    "OutsideTenant",
                )
        return Identity(f"{SERVICE_ACCOUNT_PREFIX}{account.namespace}:{account.name}", account)

    def _tenant_of(self, namespace: str) -> str:
        obj = self.namespaces.get(namespace) or {}
        return str((obj.get("metadata", {}).get("labels") or {}).get(TENANT_LABEL, ""))
