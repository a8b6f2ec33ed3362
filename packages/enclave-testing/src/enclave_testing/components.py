"""The one place that knows how to start an Enclave component as its own process on the local control plane.

Each component is a package with a ``__main__``; locally it runs with the admin kubeconfig, its probes on a
free loopback port and (where it has one) its gRPC listener on another. A component joins ``tox -e up`` and
the end-to-end tests by being added to ``COMPONENTS``; packages not installed are skipped, so a checkout that
has only some components still runs.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from enclave_testing.processes import ManagedProcess, free_port, wait_until


@dataclass(frozen=True)
class ComponentSpec:
    """How to run one component locally."""

    name: str
    module: str
    grpc: bool = False
    webhook: bool = False
    """Serves admission webhooks: gets ``--webhook-address`` on a free loopback port."""
    extra_args: Callable[[dict[str, str]], list[str]] = field(default=lambda endpoints: [])


# Order matters: a component may need the endpoints of the ones before it (admission subscribes to all).
def _admission_args(endpoints: dict[str, str]) -> list[str]:
    args = [f"--{name}-endpoint={target}" for name, target in sorted(endpoints.items())]
    return [*args, "--tls-secret-name=enclave-tls"]


COMPONENTS: list[ComponentSpec] = [
    ComponentSpec("config", "enclave_config", grpc=True),
    ComponentSpec(
        "tenants",
        "enclave_tenants",
        grpc=True,
        extra_args=lambda endpoints: [f"--config-endpoint={endpoints['config']}"] if "config" in endpoints else [],
    ),
    ComponentSpec(
        "pools",
        "enclave_pools",
        grpc=True,
        extra_args=lambda endpoints: [f"--config-endpoint={endpoints['config']}"] if "config" in endpoints else [],
    ),
    ComponentSpec(
        "quotas",
        "enclave_quotas",
        grpc=True,
        extra_args=lambda endpoints: [f"--config-endpoint={endpoints['config']}"] if "config" in endpoints else [],
    ),
    ComponentSpec(
        "globalquotas",
        "enclave_globalquotas",
        grpc=True,
        extra_args=lambda endpoints: [f"--config-endpoint={endpoints['config']}"] if "config" in endpoints else [],
    ),
    ComponentSpec(
        "replication",
        "enclave_replication",
        grpc=True,
        extra_args=lambda endpoints: [f"--config-endpoint={endpoints['config']}"] if "config" in endpoints else [],
    ),
    ComponentSpec("admission", "enclave_admission", webhook=True, extra_args=_admission_args),
]


@dataclass
class RunningComponent:
    spec: ComponentSpec
    process: ManagedProcess
    probe_port: int
    grpc_port: int | None
    webhook_port: int | None = None

    @property
    def probe_url(self) -> str:
        return f"http://127.0.0.1:{self.probe_port}"

    @property
    def webhook_url(self) -> str:
        """``https://127.0.0.1:<port>``: the ``url`` client kube-apiserver reaches the webhooks through."""
        return f"https://127.0.0.1:{self.webhook_port}"

    def ready(self) -> bool:
        """Running and answering ``/readyz`` with 200 now."""
        try:
            return self.process.running and _ready(self.probe_url)
        except OSError:
            return False

    def wait_ready(self, timeout: float = 60.0) -> None:
        try:
            wait_until(
                lambda: _ready(self.probe_url), timeout=timeout, what=f"{self.spec.name} /readyz", alive=self.process
            )
        except TimeoutError as err:
            # /readyz names the gates still closed (which snapshot, which publisher): the first thing to read.
            raise TimeoutError(f"{err}\n{self.spec.name} /readyz said: {_readyz_text(self.probe_url)}") from None

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


def available(spec: ComponentSpec) -> bool:
    return importlib.util.find_spec(spec.module) is not None


def _readyz_text(url: str) -> str:
    try:
        with urllib.request.urlopen(f"{url}/readyz?verbose", timeout=2) as response:
            return str(response.read().decode(errors="replace"))
    except urllib.error.HTTPError as err:
        return str(err.read().decode(errors="replace"))
    except OSError as err:
        return f"(unreachable: {err})"


def _ready(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
        return int(response.status) == 200


def start_component(
    spec: ComponentSpec,
    *,
    kubeconfig: Path,
    log_dir: Path,
    namespace: str,
    endpoints: dict[str, str],
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    wait_ready: bool = True,
    timeout: float = 60.0,
    identity: str = "",
    grpc_port: int | None = None,
    launcher: Callable[[ComponentSpec], list[str]] | None = None,
) -> RunningComponent:
    """Start ``spec`` as a child process; ``endpoints`` maps component names to their gRPC targets.

    ``launcher`` gives the program to run instead of this interpreter's ``python -m <module>``, e.g. the
    component's entry point inside the container image's root filesystem.
    """
    probe_port = free_port()
    port = grpc_port if grpc_port is not None else (free_port() if spec.grpc else None)
    command = [
        *(launcher(spec) if launcher is not None else [sys.executable, "-m", spec.module]),
        f"--kubeconfig={kubeconfig}",
        f"--namespace={namespace}",
        f"--probe-address=127.0.0.1:{probe_port}",
        f"--identity={identity or spec.name + '-local'}",
    ]
    if port is not None:
        command.append(f"--grpc-address=127.0.0.1:{port}")
    webhook_port = free_port() if spec.webhook else None
    if webhook_port is not None:
        command.append(f"--webhook-address=127.0.0.1:{webhook_port}")
    command += spec.extra_args(endpoints) + (args or [])
    process_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    log_name = f"{spec.name}-{identity}" if identity else spec.name
    process = ManagedProcess(log_name, command, log_dir / f"{log_name}.log", env=process_env).start()
    running = RunningComponent(spec, process, probe_port, port, webhook_port)
    if wait_ready:
        running.wait_ready(timeout)
    return running


HOST_MODULE = "enclave_core.runtime.host"
"""Several controller components in one process (``enclave-host``; docs/architecture.md)."""


@dataclass
class RunningHost:
    """One ``enclave-host`` process: its own probes (ready when every hosted component is) and, per component,
    a :class:`RunningComponent` with that component's probe and gRPC ports and the shared process."""

    process: ManagedProcess
    probe_port: int
    components: dict[str, RunningComponent]

    @property
    def probe_url(self) -> str:
        return f"http://127.0.0.1:{self.probe_port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        wait_until(lambda: _ready(self.probe_url), timeout=timeout, what="enclave-host /readyz", alive=self.process)


def routed(name: str, args: list[str]) -> list[str]:
    """``args`` of one component as the host takes them: ``--flag=value`` becomes ``--<name>:flag=value``."""
    return [f"--{name}:{arg[2:]}" if arg.startswith("--") else arg for arg in args]


def start_host(
    names: list[str],
    *,
    kubeconfig: Path,
    log_dir: Path,
    namespace: str,
    args: Callable[[ComponentSpec], list[str]] = lambda spec: [],
    common: list[str] | None = None,
    identity: str = "",
    env: dict[str, str] | None = None,
    log_name: str = "host",
) -> RunningHost:
    """Start the controller components ``names`` in one ``enclave-host`` process, each on loopback ports of its
    own; ``args(spec)`` are one component's flags (routed to it alone), ``common`` go to every component. The
    hosted components follow the hosted enclave-config (the host's default) and nothing waits for readiness."""
    specs = {spec.name: spec for spec in COMPONENTS}
    probe_port = free_port()
    command = [
        sys.executable,
        "-m",
        HOST_MODULE,
        f"--components={','.join(names)}",
        f"--probe-address=127.0.0.1:{probe_port}",
        f"--kubeconfig={kubeconfig}",
        f"--namespace={namespace}",
        f"--identity={identity or log_name + '-local'}",
        *(common or []),
    ]
    ports: dict[str, tuple[int, int]] = {}
    for name in names:
        ports[name] = (free_port(), free_port())
        command += routed(
            name,
            [f"--probe-address=127.0.0.1:{ports[name][0]}", f"--grpc-address=127.0.0.1:{ports[name][1]}"],
        )
        command += routed(name, args(specs[name]))
    process_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    process = ManagedProcess(log_name, command, log_dir / f"{log_name}.log", env=process_env).start()
    hosted = {name: RunningComponent(specs[name], process, *ports[name]) for name in names}
    return RunningHost(process, probe_port, hosted)
