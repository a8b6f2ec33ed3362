"""Every component from the image that ``tox -e image`` builds (hack/image/build.py), on the real control plane.

The components run from the image's root filesystem under ``chroot`` as the image's user (65532), each its own
process on the host's network, which is what a container runtime with host networking does minus the
namespaces: the image's own Python, site-packages, launchers and user are what runs. kube-apiserver calls the
admission server running from the image over HTTPS for the tenancy scenario. The control plane's kubeconfig and
certificates are copied into the root filesystem at the paths they have on the host, as a volume would mount them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from enclave_core.api.names import TENANT_LABEL
from enclave_testing.components import COMPONENTS, ComponentSpec, RunningComponent, start_component
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import create_namespace, start_tenancy
from enclave_testing.waiting import poll

ROOT = Path(__file__).resolve().parents[2]
IMAGE_DIR = Path(os.environ.get("ENCLAVE_IMAGE_DIR", ROOT / ".enclave" / "image"))
USER = "65532:65532"


@pytest.fixture(scope="module")
def image() -> dict[str, Any]:
    manifest = IMAGE_DIR / "image.json"
    if not manifest.exists():
        pytest.fail(f"no image in {IMAGE_DIR}: build it first with `tox -e image` (hack/image/build.py)")
    built: dict[str, Any] = json.loads(manifest.read_text())
    return built


@pytest.fixture(scope="module")
def launcher(image: dict[str, Any], control_plane: ControlPlane) -> Iterator[Callable[[ComponentSpec], list[str]]]:
    """Run a component from the image: its files mounted (copied) where the host has them, as user 65532.

    A container runtime gives the process ``/dev`` and ``/proc``; here they are bind-mounted into the root
    filesystem for the module's duration (podman itself cannot start containers in this project's sandbox:
    crun's ``setrlimit`` is refused).
    """
    rootfs = Path(image["rootfs"])
    for source in (control_plane.kubeconfig, control_plane.pki_dir):
        target = rootfs / str(source).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)
        for path in [target, *target.rglob("*")]:
            os.chown(path, 65532, 65532)
    mounted = []
    # /tmp too: the stack's certificates (enclave_testing.certificates) are mounted there, as the kubelet would.
    for system in ("dev", "proc", "tmp"):
        (rootfs / system).mkdir(exist_ok=True)
        subprocess.run(["mount", "--bind", f"/{system}", str(rootfs / system)], check=True)
        mounted.append(rootfs / system)

    def command(spec: ComponentSpec) -> list[str]:
        return ["chroot", f"--userspec={USER}", str(rootfs), f"/usr/local/bin/enclave-{spec.name}"]

    try:
        yield command
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", "--lazy", str(path)], check=False)


def in_image(image: dict[str, Any], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["chroot", f"--userspec={USER}", image["rootfs"], *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_component_has_an_entry_point_that_answers_help(image: dict[str, Any]) -> None:
    expected = {f"enclave-{spec.name}" for spec in COMPONENTS}
    assert expected <= set(image["components"])
    for script in image["components"]:
        result = in_image(image, f"/usr/local/bin/{script}", "--help")
        assert result.returncode == 0, result.stderr
        assert "usage:" in result.stdout
        if script in expected:  # the servers; ``enclave`` is the command-line tool, also in the image
            assert "--kubeconfig" in result.stdout, script


def test_image_holds_no_compiler_or_package_manager_and_runs_as_nonroot(image: dict[str, Any]) -> None:
    rootfs = Path(image["rootfs"])
    for tool in ("gcc", "cc", "c++", "ld", "apt", "apt-get", "dpkg", "dpkg-deb", "tar", "pip", "pip3", "sh", "bash"):
        assert not (rootfs / "usr/bin" / tool).exists(), tool
    assert not list((rootfs / "usr/local/lib/python3.11/dist-packages").glob("pip*")), "pip in the packages"
    # What image scanners read: the Debian release and exactly the packages whose files are in the image.
    status = (rootfs / "var/lib/dpkg/status").read_text()
    installed = {line.split(": ", 1)[1] for line in status.splitlines() if line.startswith("Package: ")}
    assert {"python3.11", "libc6", "libssl3", "base-files"} <= installed
    assert not {"dpkg", "tar", "apt", "perl-base", "coreutils", "bash"} & installed
    assert status.count("Status: install ok installed") == len(installed)
    assert "ID=debian" in (rootfs / "etc/os-release").read_text()
    assert "nonroot:x:65532:65532" in (rootfs / "etc/passwd").read_text()
    assert in_image(image, "python", "-c", "import os; print(os.getuid())").stdout.strip() == "65532"
    # The chart's ``python -m <module>`` works, and it is the mypyc build of the admission server that ships.
    compiled = in_image(image, "python", "-c", "import enclave_admission.server as s; print(s.__file__)")
    assert compiled.stdout.strip().endswith(".so"), compiled


def test_oci_config_names_user_entrypoint_and_labels(image: dict[str, Any]) -> None:
    def config_of(reference: str) -> dict[str, Any]:
        raw = subprocess.run(["skopeo", "inspect", "--config", reference], capture_output=True, text=True, check=True)
        loaded: dict[str, Any] = json.loads(raw.stdout)
        return loaded

    # The docker archive (for podman/docker/kind load and crane push) is the same image, also under the chart's
    # default tag: its appVersion, the project version.
    version = image["tag"].split("-")[0]
    oci = config_of(f"oci-archive:{image['archive']}")
    docker = config_of(f"docker-archive:{image['docker_archive']}")
    assert docker["rootfs"] == oci["rootfs"]  # the same layer, by its uncompressed digest
    assert docker["config"] == oci["config"]
    manifest = subprocess.run(
        ["tar", "-xOf", image["docker_archive"], "manifest.json"], capture_output=True, check=True
    )
    tags = json.loads(manifest.stdout)[0]["RepoTags"]
    assert tags == [f"{image['repository']}:{image['tag']}", f"{image['repository']}:{version}"]
    config = oci["config"]
    assert config["User"] == USER
    assert config["Entrypoint"] == ["/usr/local/bin/enclave-admission"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == image["tag"]
    assert image["tag"].split("-")[1].startswith(labels["org.opencontainers.image.revision"][:7])
    assert labels["org.opencontainers.image.source"].startswith("https://")


def test_tenancy_end_to_end_with_every_process_from_the_image(
    control_plane: ControlPlane,
    impersonate: Callable[..., Any],
    enclave_crds: list[str],
    launcher: Callable[[ComponentSpec], list[str]],
) -> None:
    stack = start_tenancy(control_plane, users=[{"kind": "Group", "name": "enclave.dev"}], launcher=launcher)
    try:
        tenant, alice = unique("imaged"), unique("alice")
        stack.tenant(tenant, [{"kind": "User", "name": alice}], namespaceOptions={"quota": 1})
        api = impersonate(alice, ["enclave.dev"])
        name = f"{tenant}-one"
        create_namespace(api, name)
        labels = client.CoreV1Api(stack.kube).read_namespace(name).metadata.labels or {}
        assert labels.get(TENANT_LABEL) == tenant
        with pytest.raises(client.ApiException) as refused:
            client.CoreV1Api(api).create_namespace({"metadata": {"name": f"{tenant}-two"}})
        assert "quota" in str(refused.value.body)
        poll(lambda: stack.tenant_status(tenant).get("namespaces") == [name], what="tenant status from the image")
    finally:
        stack.close()


@pytest.mark.parametrize(
    "name", [spec.name for spec in COMPONENTS if spec.name not in ("config", "tenants", "admission")]
)
def test_other_components_become_ready_from_the_image(
    control_plane: ControlPlane,
    enclave_crds: list[str],
    launcher: Callable[[ComponentSpec], list[str]],
    namespace: str,
    name: str,
) -> None:
    specs = {spec.name: spec for spec in COMPONENTS}

    def start(component: str, endpoints: dict[str, str], args: list[str] | None = None) -> RunningComponent:
        return start_component(
            specs[component],
            kubeconfig=control_plane.kubeconfig,
            log_dir=control_plane.log_dir,
            namespace=namespace,
            endpoints=endpoints,
            args=args,
            launcher=launcher,
            identity=unique(component),
        )

    config = start("config", {}, [f"--service-configuration-name={unique('img')}"])
    try:
        start(name, {"config": config.grpc_target}).process.stop()
    finally:
        config.process.stop()
