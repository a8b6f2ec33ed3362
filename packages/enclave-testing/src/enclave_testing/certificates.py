"""Per-component certificates for local processes, given to them the way the chart gives them to pods.

In a cluster enclave-config writes the serving Secret (``enclave-tls``) and one client Secret per component
(``enclave-tls-client-<component>``), and the kubelet mounts into each pod the serving Secret and that pod's
own client Secret, refreshing the files when a Secret changes. Locally :class:`SecretMounts` plays the
kubelet (the same atomic swap of a ``..data`` directory, so a reader never sees a new certificate with an old
key) and :class:`ComponentCertificates` gives each process the chart's flags, so ``tox -e up`` and
``enclave_testing.stack`` run the snapshot streams over mutual TLS, each component with its own identity, as a
cluster does.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.components import ComponentSpec

SERVING_SECRET = "enclave-tls"
SERVING_KEYS = ("tls.crt", "tls.key", "ca.crt")
CLIENT_KEYS = ("tls.crt", "tls.key")


def client_secret_name(component: str, serving: str = SERVING_SECRET) -> str:
    """The Secret enclave-config issues ``enclave-<component>``'s client certificate in (its own naming)."""
    from enclave_config.tls import client_secret_name as name

    return name(serving, f"enclave-{component}")


class SecretMounts:
    """The kubelet's part: keeps one directory per Secret holding the chosen keys, refreshed on change."""

    def __init__(self, api: Any, namespace: str, root: Path, period: float = 0.5) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.root = root
        self.period = period
        self.mounts: dict[str, tuple[Path, tuple[str, ...]]] = {}
        self.versions: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"secret-mounts-{namespace}", daemon=True)

    def mount(self, secret: str, keys: Sequence[str]) -> Path:
        """The directory ``secret``'s ``keys`` appear in (as files) once it exists."""
        directory = self.root / secret
        directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        self.mounts[secret] = (directory, tuple(keys))
        return directory

    def start(self) -> SecretMounts:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(ApiException, OSError):
                self.sync()
            self._stop.wait(self.period)

    def sync(self) -> None:
        """One pass: write every mounted Secret whose resourceVersion changed."""
        for secret in self.core.list_namespaced_secret(self.namespace).items:
            name = secret.metadata.name
            if name not in self.mounts or self.versions.get(name) == secret.metadata.resource_version:
                continue
            directory, keys = self.mounts[name]
            data = secret.data or {}
            if all(key in data for key in keys):
                _swap(directory, {key: base64.b64decode(data[key]) for key in keys})
                self.versions[name] = secret.metadata.resource_version


def _swap(directory: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` into a fresh ``..data_<n>`` directory and point ``..data`` at it in one rename, with each
    file a link through ``..data``: the kubelet's atomic update."""
    fresh = Path(tempfile.mkdtemp(prefix="..data_", dir=directory))
    fresh.chmod(0o755)
    for key, value in files.items():
        (fresh / key).write_bytes(value)
        (fresh / key).chmod(0o644)  # throwaway test certificates, readable by a component run as another user
    link = directory / "..data"
    previous = link.resolve() if link.is_symlink() else None
    staging = directory / f"..data_tmp_{time.monotonic_ns()}"
    staging.symlink_to(fresh.name)
    os.replace(staging, link)
    for key in files:
        target = directory / key
        if not target.is_symlink():
            target.symlink_to(Path("..data") / key)
    if previous is not None and previous != fresh:
        shutil.rmtree(previous, ignore_errors=True)


class ComponentCertificates:
    """The mounts and the flags of every local component: as in the chart, controllers serve with the serving
    Secret's files (enclave-config reads the Secret through the API, since it writes it), and every component
    but enclave-config presents its own client certificate to publishers."""

    def __init__(self, api: Any, namespace: str, root: Path | None = None) -> None:
        self.root = root or Path(tempfile.mkdtemp(prefix="enclave-certs-"))
        self.root.mkdir(parents=True, exist_ok=True)  # `enclave_testing.up --workdir` names one not made yet
        self.root.chmod(0o755)  # the image tests run components as the image's user
        self.mounts = SecretMounts(api, namespace, self.root)
        self.serving = self.mounts.mount(SERVING_SECRET, SERVING_KEYS)
        self.clients: dict[str, Path] = {}

    def start(self) -> ComponentCertificates:
        self.mounts.start()
        return self

    def args(self, spec: ComponentSpec) -> list[str]:
        if spec.name == "config":
            return [f"--grpc-tls-secret={SERVING_SECRET}"]
        args = self.subscriber_args(spec.name)
        if spec.grpc:
            args += [f"--grpc-tls-cert={self.serving / 'tls.crt'}", f"--grpc-tls-key={self.serving / 'tls.key'}"]
        return args

    def subscriber_args(self, component: str) -> list[str]:
        """``--grpc-ca-file``, ``--grpc-client-cert``, ``--grpc-client-key`` of ``component`` (e.g. ``admission``,
        whose certificate ``enclave doctor`` presents)."""
        client_dir = self.clients.get(component) or self.mounts.mount(client_secret_name(component), CLIENT_KEYS)
        self.clients[component] = client_dir
        return [
            f"--grpc-ca-file={self.serving / 'ca.crt'}",
            f"--grpc-client-cert={client_dir / 'tls.crt'}",
            f"--grpc-client-key={client_dir / 'tls.key'}",
        ]

    def close(self) -> None:
        self.mounts.close()
        shutil.rmtree(self.root, ignore_errors=True)


def enable_tls_reconciler(api: Any, config_name: str, timeout: float = 60.0) -> None:
    """Turn the TLS reconciler on in ServiceConfiguration ``config_name`` once enclave-config has created it:
    the certificates every other process waits for."""
    from enclave_testing.waiting import poll

    custom = client.CustomObjectsApi(api)
    patch = {"spec": {"enableTLSReconciler": True}}

    def patched() -> bool:
        try:
            custom.patch_cluster_custom_object("enclave.dev", "v1beta2", "serviceconfigurations", config_name, patch)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    poll(patched, timeout=timeout, what=f"ServiceConfiguration {config_name} created, TLS reconciler on")
