"""enclave-tenants' write loop driven by kopf: the experiment behind docs/decisions/0003-controller-runtime.md.

Not shipped. Run by ``tests/bench/kopf/test_controller_runtime.py`` as ``kopf run --standalone`` (or with
peering for the handover measurement). It converges the same subset of the cluster that enclave-tenants does
for a plain tenant (spec.owners only), with enclave-tenants' own pure functions, so that what the benchmark
compares is the runtime (kopf's per-object handlers, indexes and peering against our informers, one pure plan
per pass and a Lease), not two implementations of the domain:

- every namespace labelled ``enclave.dev/tenant=<t>``: the tenant label and the owner reference to the Tenant
  (``enclave_tenants.namespaces.desired_namespace``, server-side apply as ``enclave-tenants-kopf``) and one
  RoleBinding per (owner, cluster role) (``enclave_tenants.bindings.desired_bindings``, server-side apply);
- every Tenant: ``status`` with size, sorted namespaces, owners and a Ready condition for its generation
  (``enclave_tenants.status.tenant_status``), written only when it changes.

Written the way kopf's documentation shows: indexes for the lookups across kinds (a namespace needs its
tenant's owners, a tenant its namespaces), ``on.event`` for namespaces (level-based, no kopf state written on
objects we do not own) and ``on.resume/create/update`` for Tenants, whose status is written by a per-tenant
daemon woken on change so that ten namespaces arriving together cost one status write, as in our pass. kopf's
own settings are left at their defaults; peering (``--peering``, ``--priority``) is chosen on its command
line. Server-side apply goes through a session of our own with at most 8 connections, our write concurrency.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from datetime import UTC, datetime
from typing import Any

import aiohttp
import kopf

from enclave_core.api.names import MANAGED_BY, TENANT_LABEL, TENANTS_MANAGER
from enclave_core.api.tenancy import Tenant
from enclave_tenants import bindings as rb
from enclave_tenants import namespaces as ns
from enclave_tenants import status as st
from enclave_tenants.owners import resolve_owners
from enclave_tenants.policy import Policy

GROUP, VERSION = "enclave.dev", "v1beta2"
MANAGER = "enclave-tenants-kopf"
POLICY = Policy()

_wakeups: dict[str, asyncio.Event] = {}
_session: aiohttp.ClientSession | None = None
_server = ""


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """Our own HTTP session for server-side apply; kopf's settings stay at its defaults (peering from the CLI)."""
    global _session, _server
    config = _kubeconfig()
    _server = config["server"]
    context = ssl.create_default_context(cafile=config["ca"])
    context.load_cert_chain(config["cert"], config["key"])
    _session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=8))


@kopf.on.cleanup()
async def close(**_: Any) -> None:
    if _session is not None:
        await _session.close()


def _kubeconfig() -> dict[str, str]:
    """The kubeconfig kopf itself logs in with (client certificate), for our own apply calls."""
    import yaml

    with open(os.environ["KUBECONFIG"]) as handle:
        doc = yaml.safe_load(handle)
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    return {
        "server": cluster["server"],
        "ca": cluster["certificate-authority"],
        "cert": user["client-certificate"],
        "key": user["client-key"],
    }


async def _apply(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply (kopf's patch helpers do merge patches only), field manager ``enclave-tenants-kopf``."""
    assert _session is not None
    async with _session.patch(
        f"{_server}{path}",
        params={"fieldManager": MANAGER, "force": "true"},
        data=json.dumps(body),
        headers={"Content-Type": "application/apply-patch+yaml"},
    ) as response:
        text = await response.text()
        if response.status >= 400:
            raise kopf.TemporaryError(f"apply {path}: {response.status} {text[:200]}", delay=1)
        result: dict[str, Any] = json.loads(text)
        return result


# -- indexes: what a handler of one kind needs to know about the other ------------------------------------


@kopf.index(GROUP, VERSION, "tenants")
def tenants(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: dict(body)}


@kopf.index("", "v1", "namespaces", labels={TENANT_LABEL: kopf.PRESENT})
def tenant_namespaces(name: str, labels: kopf.Labels, **_: Any) -> dict[str, str]:
    return {labels[TENANT_LABEL]: name}


@kopf.index("rbac.authorization.k8s.io", "v1", "rolebindings", labels={MANAGED_BY: TENANTS_MANAGER})
def bindings(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    """Our RoleBindings as last seen, so a write happens only on drift (as our controller decides it)."""
    return {f"{namespace}/{name}": dict(body)}


def _owners(raw: dict[str, Any]) -> tuple[Tenant, list[Any], list[str]]:
    tenant = Tenant.model_validate(raw)
    owners, problems = resolve_owners(tenant, [], [], POLICY)
    return tenant, owners, problems


async def _converge_namespace(
    name: str, live: dict[str, Any], raw: dict[str, Any], bindings: kopf.Index[str, dict[str, Any]]
) -> None:
    """Apply what drifted: the namespace's metadata, then each RoleBinding (never a write that changes nothing)."""
    tenant, owners, _ = _owners(raw)
    uid = str(raw["metadata"].get("uid", ""))
    body, _ = ns.desired_namespace(name, tenant.metadata.name or "", uid, tenant.spec, live)
    if ns.needs_apply(live, body, MANAGER):
        await _apply(f"/api/v1/namespaces/{name}", body)
    for binding_name, binding in rb.desired_bindings(name, tenant.metadata.name or "", owners).items():
        seen = next(iter(bindings.get(f"{name}/{binding_name}", [])), None)
        if rb.drifted(seen, binding):
            path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{name}/rolebindings/{binding_name}"
            await _apply(path, binding)


# -- namespaces ---------------------------------------------------------------------------------------------


@kopf.on.event("", "v1", "namespaces", labels={TENANT_LABEL: kopf.PRESENT})
async def namespace_event(name: str, body: kopf.Body, labels: kopf.Labels, type: str, **indexes: Any) -> None:
    tenants: kopf.Index[str, dict[str, Any]] = indexes["tenants"]
    bindings: kopf.Index[str, dict[str, Any]] = indexes["bindings"]
    tenant = labels[TENANT_LABEL]
    _wake(tenant)
    if type == "DELETED" or (body.get("status") or {}).get("phase") == "Terminating":
        return
    for raw in tenants.get(tenant, []):
        await _converge_namespace(name, dict(body), raw, bindings)


def _wake(tenant: str) -> None:
    event = _wakeups.get(tenant)
    if event is not None:
        event.set()


# -- tenants -----------------------------------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, "tenants")
@kopf.on.create(GROUP, VERSION, "tenants")
@kopf.on.update(GROUP, VERSION, "tenants", field="spec")
async def tenant_changed(name: str, body: kopf.Body, **indexes: Any) -> None:
    """Owners changed (or we started): every namespace of the tenant gets its bindings again."""
    tenant_namespaces: kopf.Index[str, str] = indexes["tenant_namespaces"]
    namespace_bodies: kopf.Index[str, dict[str, Any]] = indexes["namespace_bodies"]
    bindings: kopf.Index[str, dict[str, Any]] = indexes["bindings"]
    _latest[name] = dict(body)
    _wake(name)
    for namespace in list(tenant_namespaces.get(name, [])):
        live = next(iter(namespace_bodies.get(namespace, [])), {"metadata": {"name": namespace}})
        await _converge_namespace(namespace, live, dict(body), bindings)


@kopf.index("", "v1", "namespaces", labels={TENANT_LABEL: kopf.PRESENT})
def namespace_bodies(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: dict(body)}


_latest: dict[str, dict[str, Any]] = {}


@kopf.on.event(GROUP, VERSION, "tenants")
def remember(name: str, body: kopf.Body, type: str | None, **_: Any) -> None:
    if type == "DELETED":
        _latest.pop(name, None)
    else:
        _latest[name] = dict(body)


@kopf.daemon(GROUP, VERSION, "tenants", cancellation_timeout=1)
async def tenant_status(name: str, stopped: kopf.DaemonStopped, **indexes: Any) -> None:
    """One per Tenant: write its status whenever a namespace or the tenant changed (batched by the wakeup)."""
    tenant_namespaces: kopf.Index[str, str] = indexes["tenant_namespaces"]
    event = _wakeups.setdefault(name, asyncio.Event())
    event.set()
    assert _session is not None
    while not stopped:
        await event.wait()
        event.clear()
        raw = _latest.get(name)
        if raw is None:
            await asyncio.sleep(0.1)
            continue
        _, owners, problems = _owners(raw)
        status = st.tenant_status(
            raw,
            namespaces=list(tenant_namespaces.get(name, [])),
            owners=owners,
            cordoned=False,
            problems=[st.Problem(reason="InvalidOwner", message=p) for p in problems],
            now=datetime.now(UTC),
        )
        if not st.changed(raw, status):
            continue
        path = f"{_server}/apis/{GROUP}/{VERSION}/tenants/{name}/status"
        async with _session.patch(
            path,
            data=json.dumps({"status": status}),
            headers={"Content-Type": "application/merge-patch+json"},
        ) as response:
            if response.status < 400:
                stored: dict[str, Any] = await response.json()
                _latest[name] = stored
    _wakeups.pop(name, None)
