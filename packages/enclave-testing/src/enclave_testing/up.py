"""``tox -e up``: the whole service on a local control plane, with sample tenants, until Ctrl-C.

Builds (or reuses) the pinned binaries, starts etcd, kube-apiserver and kube-controller-manager, installs the
CRDs, runs every Enclave component that is installed as its own process, applies the samples in
``hack/samples`` and prints how to act as a tenant owner. enclave-proxy runs as the chart installs it (its own
identity with the chart's ClusterRole, the chart's settings; :mod:`enclave_testing.proxy`), and the sample
tenants' owners get kubeconfigs that reach it with client certificates of their own.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from enclave_core import API_GROUP
from enclave_core.api import kind_info
from enclave_testing.binaries import ensure
from enclave_testing.certificates import ComponentCertificates, enable_tls_reconciler
from enclave_testing.components import COMPONENTS, RunningComponent, available, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.crds import crd_dir, install_crds
from enclave_testing.paths import repo_root
from enclave_testing.proxy import PROXY, RunningProxy, start_proxy

ENCLAVE_NAMESPACE = "enclave-system"
SAMPLE_OWNERS = {"alice": ["enclave.dev"], "bob": ["enclave.dev"]}
"""The users hack/samples/10-tenants.yaml makes owners (alice of solar, bob through his TenantOwner), in the
default tenant-user group: each gets a client certificate and a kubeconfig for enclave-proxy."""


def _say(message: str) -> None:
    print(f"[enclave-up] {message}", flush=True)


def apply_samples(api: Any, directory: Path) -> list[str]:
    """Create every object in ``directory`` (custom objects included); existing ones are left as they are."""
    created = []
    custom = client.CustomObjectsApi(api)
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            group, _, version = doc["apiVersion"].rpartition("/")
            name = f"{doc['kind']}/{doc['metadata']['name']}"
            try:
                if group == API_GROUP:
                    plural = kind_info(doc["kind"]).plural
                    namespace = doc["metadata"].get("namespace")
                    if namespace:
                        custom.create_namespaced_custom_object(group, version, namespace, plural, doc)
                    else:
                        custom.create_cluster_custom_object(group, version, plural, doc)
                else:
                    utils.create_from_dict(api, doc)
                created.append(name)
            except ApiException as err:
                if err.status != 409:
                    raise
            except utils.FailToCreateError as err:
                if not all(getattr(e, "status", None) == 409 for e in err.api_exceptions):
                    raise
    return created


def configure_admission(
    api: Any,
    url: str,
    name: str = "default",
    timeout: float = 60.0,
    *,
    pools: bool = False,
    quotas: bool = False,
    replication: bool = False,
    globalquotas: bool = False,
) -> None:
    """Patch ServiceConfiguration ``name`` (created by the config component) with the TLS reconciler on and
    Enclave's default webhooks pointing at ``url`` (with the pool hooks when the pools component runs, the custom
    quota hooks when enclave-quotas runs, the replication hooks when enclave-replication runs, the global quota
    hooks when enclave-globalquotas runs)."""
    from enclave_admission.defaults import url_client, webhooks

    custom = client.CustomObjectsApi(api)
    admission = webhooks(
        url_client(url),
        namespace=ENCLAVE_NAMESPACE,
        pools=pools,
        quotas=quotas,
        replication=replication,
        globalquotas=globalquotas,
    ).to_k8s()
    patch = {"spec": {"enableTLSReconciler": True, "admission": admission}}
    deadline = time.monotonic() + timeout
    while True:
        try:
            custom.patch_cluster_custom_object(API_GROUP, "v1beta2", "serviceconfigurations", name, patch)
            return
        except ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the config component creates it right after it starts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tox -e up", description=__doc__)
    parser.add_argument("--workdir", type=Path, default=repo_root() / ".enclave" / "dev")
    parser.add_argument("--exit-when-ready", action="store_true", help="stop once everything is up (smoke test)")
    args = parser.parse_args(argv)

    plane = ControlPlane(args.workdir / "cluster")
    running: list[RunningComponent] = []
    certificates: ComponentCertificates | None = None
    proxy: RunningProxy | None = None
    stop = False

    def request_stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    # Ctrl-C raises KeyboardInterrupt even when this process inherited SIGINT ignored (a non-interactive shell
    # ignores it in the commands it runs in the background, and Python then leaves it so): otherwise the only
    # way to stop `tox -e up` started that way is SIGKILL, which leaves every component running.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _say("starting etcd, kube-apiserver and kube-controller-manager (first run builds them: minutes)")
        plane.start()
        api = plane.admin_client()
        if any(crd_dir().glob("*.yaml")):
            names = install_crds(api)
            _say(f"installed {len(names)} CRDs")
        with contextlib.suppress(ApiException):
            client.CoreV1Api(api).create_namespace({"metadata": {"name": ENCLAVE_NAMESPACE}})
        endpoints: dict[str, str] = {}
        certificates = ComponentCertificates(api, ENCLAVE_NAMESPACE, args.workdir / "certificates").start()
        for spec in COMPONENTS:
            if not available(spec):
                _say(f"component {spec.name}: not installed, skipped")
                continue
            component = start_component(
                spec,
                kubeconfig=plane.kubeconfig,
                log_dir=args.workdir / "logs",
                namespace=ENCLAVE_NAMESPACE,
                endpoints=endpoints,
                wait_ready=not spec.webhook and spec.name != "config",
                # As in production: admission accepts only kube-apiserver's webhook client certificate; the one
                # config process of the cluster keeps the CRDs (conversion client and CA, storage migration); the
                # snapshot streams are mutual TLS, each component presenting its own client certificate.
                args=[
                    *certificates.args(spec),
                    *(plane.webhook_client_args() if spec.webhook else []),
                    *(["--manage-crds"] if spec.name == "config" else []),
                ],
            )
            running.append(component)
            if spec.name == "config":
                # It serves gRPC once it has written the certificates, which the TLS reconciler does.
                enable_tls_reconciler(api, "default")
                component.wait_ready()
            if spec.webhook:
                # The admission server needs its certificate (written by the config component once the TLS
                # reconciler is on) before it is ready; kube-apiserver needs the webhooks to reach it.
                configure_admission(
                    api,
                    component.webhook_url,
                    pools="pools" in endpoints,
                    quotas="quotas" in endpoints,
                    replication="replication" in endpoints,
                    globalquotas="globalquotas" in endpoints,
                )
                _say(f"ServiceConfiguration default: TLS reconciler on, webhooks at {component.webhook_url}")
                component.wait_ready()
            if component.grpc_port:
                endpoints[spec.name] = component.grpc_target
            _say(f"component {spec.name}: ready (probes {component.probe_url})")
        samples = apply_samples(api, repo_root() / "hack" / "samples")
        _say(f"applied samples: {', '.join(samples) or 'none new'}")
        owners: dict[str, Path] = {}
        if available(PROXY) and {"config", "tenants"} <= endpoints.keys():
            proxy = start_proxy(
                plane,
                certificates=certificates,
                endpoints=endpoints,
                namespace=ENCLAVE_NAMESPACE,
                workdir=args.workdir / "proxy",
                log_dir=args.workdir / "logs",
                identity="enclave-proxy",
            )
            running.append(proxy.component)
            owners = owner_kubeconfigs(plane, proxy)
            _say(f"component proxy: ready at {proxy.url} (probes {proxy.component.probe_url})")
        kubeconfig = args.workdir / "kubeconfig"
        shutil.copy(plane.kubeconfig, kubeconfig)
        _print_guide(kubeconfig, _kubectl(args.workdir / "bin"), running, args.workdir / "logs", owners)
        while not stop and not args.exit_when_ready:
            time.sleep(0.5)
            dead = [c.spec.name for c in running if not c.process.running]
            if dead or not plane.healthy():
                _say(f"a process exited ({', '.join(dead) or 'control plane'}); logs in {args.workdir / 'logs'}")
                return 1
    except KeyboardInterrupt:
        pass
    finally:
        _say("stopping")
        for component in reversed(running):
            component.process.stop()
        if proxy is not None:
            proxy.stop()
        if certificates is not None:
            certificates.close()
        plane.stop()
    return 0


def owner_kubeconfigs(plane: ControlPlane, proxy: RunningProxy) -> dict[str, Path]:
    """A client certificate (the control plane's CA, which the proxy is given as its client CA) and a kubeconfig
    for enclave-proxy per sample owner: what an owner's own credentials would be on a real cluster."""
    assert plane.ca is not None
    found: dict[str, Path] = {}
    for user, groups in SAMPLE_OWNERS.items():
        pair = plane.ca.issue(user, organizations=groups, server=False, client=True)
        cert, key = proxy.workdir / f"{user}.crt", proxy.workdir / f"{user}.key"
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        key.chmod(0o600)
        found[user] = proxy.kubeconfig(user, {"client-certificate": str(cert), "client-key": str(key)})
    return found


def _kubectl(bin_dir: Path) -> Path:
    """kubectl of the control plane's own release (built from the pinned module like the servers, cached the
    same way), linked into ``bin_dir`` so the guide's ``export PATH=...`` line finds it on a machine that has
    none."""
    built = ensure("kubectl")["kubectl"]
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "kubectl"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(built)
    return link


def _print_guide(
    kubeconfig: Path, kubectl: Path, running: list[RunningComponent], logs: Path, owners: dict[str, Path]
) -> None:
    names = [c.spec.name for c in running]
    through_proxy = (
        f"""
  # alice through enclave-proxy, signed in with her own client certificate (no --as): she lists namespaces,
  # which kube-apiserver refuses her, and sees her tenant's only; bob's kubeconfig is {owners["bob"]}
  kubectl --kubeconfig {owners["alice"]} get namespaces
"""
        if "alice" in owners and "admission" in names
        else ""
    )
    tenancy = (
        """  # act as alice, owner of the sample tenant "solar": her namespace joins her tenant, she is its admin
  kubectl --as alice --as-group enclave.dev create namespace solar-dev
  kubectl get namespaces -l enclave.dev/tenant=solar
  kubectl --as alice --as-group enclave.dev -n solar-dev create configmap hello --from-literal=from=alice
  kubectl --as alice --as-group enclave.dev -n solar-dev get configmaps,rolebindings
"""
        if "admission" in names
        else """  # the global configuration, its status (tenants, users) and what it generated:
  kubectl get serviceconfiguration default -o yaml
  kubectl get clusterroles,clusterrolebindings -l app.kubernetes.io/managed-by=enclave-config
"""
    )
    print(
        f"""
Enclave is up.

  kubeconfig (admin):  {kubeconfig}
  kubectl:             {kubectl} ({kubectl.resolve().parent.name})
  components:          {", ".join(names) or "none yet"}
  component logs:      {logs}

Try it in another shell (the admin may impersonate anyone, so --as acts as a tenant user):

  export KUBECONFIG={kubeconfig}
  export PATH={kubectl.parent}:$PATH
  kubectl get tenants,tenantowners,serviceconfigurations
{tenancy}{through_proxy}
  # or from Python, as alice:
  from kubernetes import client, config
  api = config.new_client_from_config("{kubeconfig}")
  api.set_default_header("Impersonate-User", "alice")
  api.set_default_header("Impersonate-Group", "enclave.dev")
  client.CoreV1Api(api).create_namespace({{"metadata": {{"name": "solar-prod"}}}})

Ctrl-C stops everything.
""",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
