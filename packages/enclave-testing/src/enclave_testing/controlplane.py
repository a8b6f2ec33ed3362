"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager.

It is configured like a small real cluster (RBAC, the admission plugins a production apiserver runs, the
controllers that finalise namespaces, collect garbage, compute quota usage and mint service-account tokens), so
that what passes here passes there. The admin identity is in ``system:masters`` and may therefore impersonate
any user or group: that is how tests act as tenant owners, administrators and service accounts.

Opt-in (``simulated_nodes=N``): kube-scheduler, KWOK and the deployment controller join, with N simulated Nodes,
so Deployments get Pods that are scheduled, reported Running and Ready, and counted by ResourceQuota as on a
cluster with kubelets (:mod:`enclave_testing.kwok`).
"""

from __future__ import annotations

import shutil
import signal
import ssl
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from enclave_core.pki import CertificateAuthority, KeyPair, signing_key_pair
from enclave_testing import binaries, kwok
from enclave_testing.processes import ManagedProcess, free_port, wait_until

ADMISSION_PLUGINS = [
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "PodNodeSelector",
    "DefaultStorageClass",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ResourceQuota",
]

CONTROLLERS = [
    "namespace-controller",
    "garbage-collector-controller",
    "resourcequota-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
    "replicaset-controller",  # tenant rules judge the Pods controllers create (tests/integration/rules)
]

SIMULATED_NODE_CONTROLLERS = ["deployment-controller"]
"""Added with simulated nodes: Deployments roll out ReplicaSets (``helm install --wait`` waits for them)."""

SERVICE_CIDR = "10.0.0.0/24"
ADMIN_USER = "enclave-admin"
WEBHOOK_CLIENT = "kube-apiserver-webhook-client"
"""Common name of the client certificate kube-apiserver presents to admission webhooks (see
``--admission-control-config-file``); webhook servers verify it against :attr:`ControlPlane.ca_file`."""


@dataclass
class ControlPlane:
    """Start, wait for, and stop a local control plane rooted in ``workdir``."""

    workdir: Path
    processes: list[ManagedProcess] = field(default_factory=list)
    api_port: int = 0
    ca: CertificateAuthority | None = None
    apiserver_args: list[str] = field(default_factory=list)
    """Extra kube-apiserver flags, e.g. ``--authentication-config`` for sign-in through an identity provider."""
    simulated_nodes: int = 0
    """Opt-in: run kube-scheduler, kwok and the deployment controller too, with this many KWOK Nodes."""

    @property
    def pki_dir(self) -> Path:
        return self.workdir / "pki"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca_file(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def webhook_client_cert(self) -> tuple[Path, Path]:
        """(certificate, key) kube-apiserver presents to webhooks; tests that call a webhook directly as the
        apiserver would use it too."""
        return self.pki_dir / "webhook-client.crt", self.pki_dir / "webhook-client.key"

    def webhook_client_args(self) -> list[str]:
        """The admission server's flags that accept exactly kube-apiserver's webhook client certificate."""
        return [f"--client-ca-file={self.ca_file}", f"--client-allowed-names={WEBHOOK_CLIENT}"]

    # -- start ---------------------------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> ControlPlane:
        simulated = ("kube-scheduler", "kwok") if self.simulated_nodes else ()
        paths = binaries.ensure("etcd", "kube-apiserver", "kube-controller-manager", *simulated)
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        self.workdir.mkdir(parents=True)
        self._write_pki()
        try:
            self._start_etcd(paths["etcd"], timeout)
            self._start_apiserver(paths["kube-apiserver"], timeout)
            self._start_controller_manager(paths["kube-controller-manager"], timeout)
            if self.simulated_nodes:
                self._start_scheduler(paths["kube-scheduler"], timeout)
                self._start_kwok(paths["kwok"], timeout)
                self.add_simulated_nodes(self.simulated_nodes, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _write_pki(self) -> None:
        self.pki_dir.mkdir(parents=True)
        self.ca = CertificateAuthority.generate("enclave-test-ca")
        self._write_pair("ca", self.ca.pair)
        serving = self.ca.issue(
            "kube-apiserver",
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=["127.0.0.1", "10.0.0.1"],
        )
        self._write_pair("apiserver", serving)
        admin = self.ca.issue(ADMIN_USER, organizations=["system:masters"], server=False, client=True)
        self._write_pair("admin", admin)
        kcm = self.ca.issue("system:kube-controller-manager", server=False, client=True)
        self._write_pair("kube-controller-manager", kcm)
        if self.simulated_nodes:
            scheduler = self.ca.issue("system:kube-scheduler", server=False, client=True)
            self._write_pair("kube-scheduler", scheduler)
            # kwok plays every kubelet and the node lifecycle (Node and Pod status, Pod deletion): the admin group
            # rather than a hand-made role that would have to follow kwok's needs release by release.
            simulator = self.ca.issue("enclave-kwok", organizations=["system:masters"], server=False, client=True)
            self._write_pair("kwok", simulator)
        webhook_client = self.ca.issue(WEBHOOK_CLIENT, server=False, client=True)
        self._write_pair("webhook-client", webhook_client)
        self._write_admission_configuration()
        sa_key, sa_pub = signing_key_pair()
        (self.pki_dir / "sa.key").write_bytes(sa_key)
        (self.pki_dir / "sa.pub").write_bytes(sa_pub)

    @property
    def admission_configuration(self) -> Path:
        return self.workdir / "admission-configuration.yaml"

    def _write_admission_configuration(self) -> None:
        """kube-apiserver presents a client certificate to every webhook that asks for one, as a production
        apiserver configured for webhook client authentication does (docs/architecture.md, "Who may call
        admission"): the webhook plugins' kubeconfig names the certificate for any webhook host (``*``)."""
        cert, key = self.webhook_client_cert
        kubeconfig = self.workdir / "webhook-client.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "users": [{"name": "*", "user": {"client-certificate": str(cert), "client-key": str(key)}}],
                },
                sort_keys=False,
            )
        )
        webhook = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(kubeconfig),
        }
        configuration = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [
                {"name": "ValidatingAdmissionWebhook", "configuration": webhook},
                {"name": "MutatingAdmissionWebhook", "configuration": webhook},
            ],
        }
        self.admission_configuration.write_text(yaml.safe_dump(configuration, sort_keys=False))

    def _write_pair(self, name: str, pair: KeyPair) -> None:
        (self.pki_dir / f"{name}.crt").write_bytes(pair.cert_pem)
        key = self.pki_dir / f"{name}.key"
        key.write_bytes(pair.key_pem)
        key.chmod(0o600)

    def _spawn(self, name: str, args: list[str]) -> ManagedProcess:
        proc = ManagedProcess(name, args, self.log_dir / f"{name}.log").start()
        self.processes.append(proc)
        return proc

    def _process(self, name: str) -> ManagedProcess:
        return next(proc for proc in self.processes if proc.name == name)

    def _start_etcd(self, binary: Path, timeout: float) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc = self._spawn(
            "etcd",
            [
                str(binary),
                "--name=enclave-test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=enclave-test=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",  # throwaway data: durability costs seconds per test session
                "--log-level=warn",
            ],
        )
        self._wait_etcd(proc, timeout)

    def _wait_etcd(self, proc: ManagedProcess, timeout: float) -> None:
        wait_until(lambda: _http_ok(f"{self.etcd_url}/health"), timeout=timeout, what="etcd health", alive=proc)

    def _start_apiserver(self, binary: Path, timeout: float) -> None:
        self.api_port = free_port()
        pki = self.pki_dir
        proc = self._spawn(
            "kube-apiserver",
            [
                str(binary),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
                f"--admission-control-config-file={self.admission_configuration}",
                "--allow-privileged=true",
                # Loopback cannot be an Endpoints address; nothing here routes to the kubernetes Service anyway.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=1",
                *self.apiserver_args,
            ],
        )
        self._write_kubeconfig(self.kubeconfig, "admin")
        self._wait_apiserver(proc, timeout)

    def _wait_apiserver(self, proc: ManagedProcess, timeout: float) -> None:
        wait_until(lambda: self._api_get("/readyz") == 200, timeout=timeout, what="kube-apiserver /readyz", alive=proc)

    def _start_controller_manager(self, binary: Path, timeout: float) -> None:
        kubeconfig = self.workdir / "kube-controller-manager.kubeconfig"
        self._write_kubeconfig(kubeconfig, "kube-controller-manager")
        pki = self.pki_dir
        proc = self._spawn(
            "kube-controller-manager",
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--controllers={','.join(CONTROLLERS + (SIMULATED_NODE_CONTROLLERS if self.simulated_nodes else []))}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                "--concurrent-namespace-syncs=5",
                "--v=1",
            ],
        )
        # Ready once the service-account controller has populated kube-system: the token and namespace
        # controllers start in the same pass.
        wait_until(
            lambda: self._api_get("/api/v1/namespaces/default/serviceaccounts/default") == 200,
            timeout=timeout,
            what="kube-controller-manager (default service account)",
            alive=proc,
        )

    def _start_scheduler(self, binary: Path, timeout: float) -> None:
        kubeconfig = self.workdir / "kube-scheduler.kubeconfig"
        self._write_kubeconfig(kubeconfig, "kube-scheduler")
        port = free_port()
        proc = self._spawn(
            "kube-scheduler",
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--leader-elect=false",
                "--v=1",
            ],
        )
        wait_until(
            lambda: _https_ok(f"https://127.0.0.1:{port}/readyz"), timeout=timeout, what="kube-scheduler", alive=proc
        )

    def _start_kwok(self, binary: Path, timeout: float) -> None:
        kubeconfig = self.workdir / "kwok.kubeconfig"
        self._write_kubeconfig(kubeconfig, "kwok")
        port = free_port()
        proc = self._spawn(
            "kwok",
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={kwok.NODE_ANNOTATION}=fake",
                f"--cidr={kwok.POD_CIDR}",
                "--node-lease-duration-seconds=0",
                f"--server-address=127.0.0.1:{port}",
                *(f"--config={stage}" for stage in kwok.stage_files()),
            ],
        )
        wait_until(lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=timeout, what="kwok", alive=proc)

    def add_simulated_nodes(self, count: int, timeout: float = 60.0) -> list[str]:
        """Create ``count`` more KWOK Nodes and wait until kwok reports each Ready; returns their names."""
        from kubernetes import client

        core = client.CoreV1Api(self.admin_client())
        first = len(core.list_node(label_selector=kwok.NODE_LABEL).items)
        names = [f"kwok-node-{index}" for index in range(first, first + count)]
        for name in names:
            core.create_node(kwok.node_body(name))
        alive = next(proc for proc in self.processes if proc.name == "kwok")

        def all_ready() -> bool:
            listed = {node.metadata.name: node for node in core.list_node(label_selector=kwok.NODE_LABEL).items}
            return all(name in listed and kwok.ready(listed[name]) for name in names)

        wait_until(all_ready, timeout=timeout, what=f"{count} KWOK Nodes Ready", alive=alive)
        for name in names:
            # kube-apiserver taints every new Node not-ready (TaintNodesByCondition); the node lifecycle
            # controller lifts it once the Node reports Ready. That controller does not run here (kwok sends
            # no heartbeats, so it would soon declare the Nodes lost), so the taint is lifted as it would.
            core.patch_node(name, {"spec": {"taints": None}})
        return names

    def _write_kubeconfig(self, path: Path, identity: str) -> None:
        config: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "enclave-local",
                    "cluster": {"server": self.api_url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [
                {
                    "name": identity,
                    "user": {
                        "client-certificate": str(self.pki_dir / f"{identity}.crt"),
                        "client-key": str(self.pki_dir / f"{identity}.key"),
                    },
                }
            ],
            "contexts": [{"name": "enclave-local", "context": {"cluster": "enclave-local", "user": identity}}],
            "current-context": "enclave-local",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))

    def _api_get(self, path: str) -> int:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        try:
            with urllib.request.urlopen(f"{self.api_url}{path}", context=context, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as err:
            return int(err.code)

    # -- use -----------------------------------------------------------------------------------------------

    def admin_client(self) -> Any:
        """A synchronous ``kubernetes.client.ApiClient`` acting as the cluster admin."""
        from enclave_testing.clients import api_client

        return api_client(self.kubeconfig)

    def identity_kubeconfig(self, user: str, groups: list[str] | None = None) -> Path:
        """A kubeconfig that signs in as ``user`` (in ``groups``) with its own client certificate.

        Unlike impersonation the apiserver sees this user as the caller, so its audit log and flow control
        tell this client's requests apart (benchmarks count a controller's API calls this way). The files are
        named without the ``:`` of a ServiceAccount's user name: ``KUBECONFIG`` is a ``:``-separated list."""
        assert self.ca is not None
        pair = self.ca.issue(user, organizations=groups or [], server=False, client=True)
        stem = user.replace(":", "-")
        self._write_pair(stem, pair)
        path = self.workdir / f"{stem}.kubeconfig"
        self._write_kubeconfig(path, stem)
        return path

    def impersonate(self, user: str, groups: list[str] | None = None) -> Any:
        """An ``ApiClient`` that acts as ``user`` in ``groups`` (through the admin's impersonation right)."""
        from enclave_testing.clients import api_client

        return api_client(self.kubeconfig, user=user, groups=groups or [])

    # -- faults: stop and start kube-apiserver or etcd in place ----------------------------------------------
    #
    # For a test that owns its control plane (never the session's shared one): the process is started again
    # with the very arguments it had, so kube-apiserver comes back on the same port with the same PKI and etcd
    # on the same ports with the same data directory; clients and kubeconfigs keep working unchanged.

    def stop_apiserver(self, *, kill: bool = False) -> None:
        """Stop kube-apiserver: SIGTERM (its graceful shutdown) or, with ``kill``, SIGKILL (a crash)."""
        self._stop("kube-apiserver", kill=kill)

    def start_apiserver(self, timeout: float = 90.0) -> None:
        """Start the stopped kube-apiserver again; returns once its ``/readyz`` answers 200."""
        self._wait_apiserver(self._restart("kube-apiserver"), timeout)

    def restart_apiserver(self, *, kill: bool = False, timeout: float = 90.0) -> None:
        self.stop_apiserver(kill=kill)
        self.start_apiserver(timeout)

    def stop_etcd(self, *, kill: bool = False) -> None:
        """Stop etcd; kube-apiserver keeps running and answers errors meanwhile, as it does in a cluster."""
        self._stop("etcd", kill=kill)

    def start_etcd(self, timeout: float = 90.0) -> None:
        """Start the stopped etcd on its data directory again; returns once it is healthy *and* kube-apiserver
        is ready on it again."""
        self._wait_etcd(self._restart("etcd"), timeout)
        self._wait_apiserver(self._process("kube-apiserver"), timeout)

    def restart_etcd(self, *, kill: bool = False, timeout: float = 90.0) -> None:
        self.stop_etcd(kill=kill)
        self.start_etcd(timeout)

    def _stop(self, name: str, *, kill: bool) -> None:
        proc = self._process(name)
        if kill and proc.popen is not None and proc.running:
            proc.popen.send_signal(signal.SIGKILL)
            proc.popen.wait(15)
        proc.stop()

    def _restart(self, name: str) -> ManagedProcess:
        old = self._process(name)
        assert not old.running, f"{name} is still running"
        fresh = ManagedProcess(name, old.args, old.log_path, env=old.env, cwd=old.cwd).start()
        self.processes[self.processes.index(old)] = fresh
        return fresh

    # -- stop ----------------------------------------------------------------------------------------------

    def healthy(self) -> bool:
        return all(proc.running for proc in self.processes)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as response:
        return int(response.status) == 200


def _https_ok(url: str) -> bool:
    """A component's own serving certificate is self-signed: only reachability and the status matter."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=2, context=context) as response:
        return int(response.status) == 200
