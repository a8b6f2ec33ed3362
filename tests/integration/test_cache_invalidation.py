"""spec.cacheInvalidation against the real control plane: a cache that a watch left wrong is corrected by the
next relist.

enclave-config reaches kube-apiserver through a proxy that, while told to, drops every watch event it carries:
the component's watches stay connected and hear nothing, as when an event is lost on the way. A Tenant created
(then deleted) meanwhile is an object the watch never reports, and with an event passed after it (another
Tenant) the watch's resourceVersion moves past it, so no resumed watch replays it either. Only a relist finds
it: ``status.tenants``, which enclave-config derives from its Tenant cache, shows the missed Tenant (and then
drops it) within a few periods of 3 s, and the component's metrics count the relists.

The whole tenancy stack at 2 s shows the period reaching every component through the configuration snapshot:
enclave-tenants relists, admission re-takes its Tenancy snapshot whole and keeps deciding from it (an owner's
namespace admitted, a stranger's claim refused) while it stays ready.
"""

from __future__ import annotations

import contextlib
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import ClientSession, ClientTimeout, TCPConnector, web
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.names import TENANT_LABEL
from enclave_core.snapshots.tenancy import TENANCY_KIND
from enclave_testing.balancer import LoopThread
from enclave_testing.components import COMPONENTS, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, create_namespace, remove_configuration, start_tenancy
from enclave_testing.waiting import poll

pytestmark = pytest.mark.integration

GROUP, VERSION = "enclave.dev", "v1beta2"
CONFIG = next(spec for spec in COMPONENTS if spec.name == "config")
PERIOD = "3s"
HOP_BY_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "accept-encoding"}


class DroppingProxy(LoopThread):
    """HTTPS in front of kube-apiserver, on its own event loop in a thread: every request passes through
    (as the admin of the control plane), and while :attr:`dropping` the watch streams carry no events.

    The component connects with a kubeconfig naming this proxy; the proxy serves kube-apiserver's own certificate
    (it names 127.0.0.1), so the component verifies it with the control plane's CA as usual."""

    def __init__(self, control_plane: ControlPlane) -> None:
        super().__init__("dropping-proxy")
        self.control_plane = control_plane
        self.dropping = False
        self.dropped: list[bytes] = []
        """Watch lines (events, bookmarks) dropped so far."""
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    def kubeconfig(self, directory: Path) -> Path:
        """The control plane's admin kubeconfig, pointed at the proxy."""
        config = yaml.safe_load(self.control_plane.kubeconfig.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        path = directory / "through-proxy.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path

    def dropped_about(self, name: str) -> bool:
        return any(name.encode() in line for line in list(self.dropped))

    async def _start(self) -> None:
        pki = self.control_plane.pki_dir
        upstream = ssl.create_default_context(cafile=str(self.control_plane.ca_file))
        upstream.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        # Large read buffer: a watch event is one line, and a CustomResourceDefinition's is hundreds of KiB.
        self._session = ClientSession(
            connector=TCPConnector(ssl=upstream), timeout=ClientTimeout(total=None), read_bufsize=64 * 1024 * 1024
        )
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(str(pki / "apiserver.crt"), str(pki / "apiserver.key"))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # A watch the component closes (its relist) must end the upstream one too.
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=serving)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        headers = {key: value for key, value in request.headers.items() if key.lower() not in HOP_BY_HOP}
        body = await request.read()
        url = self.control_plane.api_url + request.path_qs
        async with self._session.request(request.method, url, headers=headers, data=body or None) as answer:
            response = web.StreamResponse(status=answer.status)
            if "Content-Type" in answer.headers:
                response.headers["Content-Type"] = answer.headers["Content-Type"]
            await response.prepare(request)
            if request.query.get("watch") in ("true", "1"):
                while line := await answer.content.readline():
                    if self.dropping:
                        self.dropped.append(line)
                    else:
                        await response.write(line)
            else:
                async for chunk in answer.content.iter_any():
                    await response.write(chunk)
            await response.write_eof()
            return response


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[DroppingProxy]:
    with DroppingProxy(control_plane) as running:
        yield running


@pytest.fixture
def config_behind_proxy(
    control_plane: ControlPlane, kube: Any, enclave_crds: list[str], proxy: DroppingProxy, tmp_path: Path
) -> Iterator[tuple[str, RunningComponent]]:
    """enclave-config owning a ServiceConfiguration of its own with ``cacheInvalidation: 3s``, behind the proxy."""
    name, namespace = unique("cache"), unique("cache-ns")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    custom = client.CustomObjectsApi(kube)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ServiceConfiguration",
        "metadata": {"name": name},
        "spec": {"cacheInvalidation": PERIOD},
    }
    custom.create_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", body)
    running = start_component(
        CONFIG,
        kubeconfig=proxy.kubeconfig(tmp_path),
        log_dir=control_plane.log_dir,
        namespace=namespace,
        endpoints={},
        args=[f"--service-configuration-name={name}"],
        identity=unique("config"),
    )
    try:
        yield name, running
    finally:
        running.process.stop()
        remove_configuration(kube, name)
        with contextlib.suppress(ApiException):
            core.delete_namespace(namespace)


def _status_tenants(kube: Any, name: str) -> list[str]:
    obj = client.CustomObjectsApi(kube).get_cluster_custom_object(GROUP, VERSION, "serviceconfigurations", name)
    return list((obj.get("status") or {}).get("tenants") or [])


def _metric(running: RunningComponent, name: str, cache: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{running.probe_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{cache="{cache}"}} '):
            return float(line.split()[-1])
    return 0.0


def _create_tenant(kube: Any, name: str) -> None:
    owners = [{"kind": "User", "name": "alice"}]
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"owners": owners},
    }
    client.CustomObjectsApi(kube).create_cluster_custom_object(GROUP, VERSION, "tenants", body)


def test_a_tenant_the_watch_never_reported_is_found_and_dropped_by_the_relists(
    kube: Any, proxy: DroppingProxy, config_behind_proxy: tuple[str, RunningComponent]
) -> None:
    name, running = config_behind_proxy
    custom = client.CustomObjectsApi(kube)
    missed, heard = unique("missed"), unique("heard")
    poll(lambda: _metric(running, "enclave_cache_invalidations_total", "tenants") >= 1, timeout=60)
    try:
        # Created while the watches hear nothing: the Tenant's ADDED event is dropped on the way.
        proxy.dropping = True
        _create_tenant(kube, missed)
        poll(lambda: proxy.dropped_about(missed), timeout=30)
        proxy.dropping = False
        # An event after it reaches the component: the watch's resourceVersion is past the missed one now.
        _create_tenant(kube, heard)
        poll(lambda: heard in _status_tenants(kube, name), timeout=30)
        poll(lambda: missed in _status_tenants(kube, name), timeout=60)
        # Deleted while the watches hear nothing: a relist drops it.
        relists = _metric(running, "enclave_cache_invalidations_total", "tenants")
        proxy.dropping = True
        custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", missed)
        poll(lambda: proxy.dropped_about(missed) and _deleted_dropped(proxy, missed), timeout=30)
        proxy.dropping = False
        poll(lambda: missed not in _status_tenants(kube, name), timeout=60)
        assert heard in _status_tenants(kube, name)
        assert _metric(running, "enclave_cache_invalidations_total", "tenants") > relists
        assert _metric(running, "enclave_cache_last_invalidation_timestamp_seconds", "tenants") > 0
    finally:
        proxy.dropping = False
        for tenant in (missed, heard):
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(GROUP, VERSION, "tenants", tenant)


def _deleted_dropped(proxy: DroppingProxy, name: str) -> bool:
    return any(b'"DELETED"' in line and name.encode() in line for line in list(proxy.dropped))


USERS = "cache-users"


@pytest.fixture
def stack(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    running = start_tenancy(control_plane, [{"kind": "Group", "name": USERS}], extra_spec={"cacheInvalidation": "2s"})
    try:
        yield running
    finally:
        running.close()


def test_admission_retakes_its_snapshots_each_period_and_keeps_deciding(stack: TenancyStack) -> None:
    components = {running.spec.name: running for running in stack.processes}
    admission, tenants = components["admission"], components["tenants"]
    tenant, owner, stranger = unique("retaken"), unique("owner"), unique("stranger")
    stack.tenant(tenant, [{"kind": "User", "name": owner}])
    core = client.CoreV1Api(stack.kube)
    created: list[str] = []
    try:
        retaken = f"snapshot:{TENANCY_KIND}"
        poll(lambda: _metric(admission, "enclave_cache_invalidations_total", retaken) >= 2, timeout=60)
        poll(lambda: _metric(tenants, "enclave_cache_invalidations_total", "tenants") >= 2, timeout=60)
        before = _metric(admission, "enclave_cache_invalidations_total", retaken)
        # Decided from a snapshot taken whole after at least two invalidations, and still ready meanwhile.
        created.append(f"{tenant}-ns")
        create_namespace(stack.plane.impersonate(owner, [USERS]), created[-1])
        assert (core.read_namespace(created[-1]).metadata.labels or {}).get(TENANT_LABEL) == tenant
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(stack.plane.impersonate(stranger, [USERS])).create_namespace(
                {"metadata": {"name": f"{tenant}-stranger", "labels": {TENANT_LABEL: tenant}}}
            )
        assert refused.value.status == 403, refused.value.body
        poll(lambda: _metric(admission, "enclave_cache_invalidations_total", retaken) > before, timeout=30)
        with urllib.request.urlopen(f"{admission.probe_url}/readyz", timeout=5) as answer:
            assert answer.status == 200
    finally:
        for name in created:
            with contextlib.suppress(ApiException):
                core.delete_namespace(name)
