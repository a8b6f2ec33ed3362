"""The configuration loop on :class:`enclave_testing.memorykube.MemoryKube`: it converges (Secrets, webhook
configurations, policies, RBAC, status), a settled pass writes nothing, and a failed pass is retried by the
runtime's loop (no control plane)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from prometheus_client import REGISTRY

from enclave_config import policies
from enclave_config.controller import ADMISSION_PATHS, RBAC_PATHS, ConfigController, Settings
from enclave_core import GROUP_VERSION
from enclave_core.kube.events import EventRecorder
from enclave_core.snapshots.hub import SnapshotHub
from enclave_testing.examples import example
from enclave_testing.memorykube import Echo, MemoryKube, Outage, running, settle
from enclave_testing.waiting import poll_async

CONFIGS = f"/apis/{GROUP_VERSION}/serviceconfigurations"
NAMESPACE = "enclave-system"


class Config:
    """A controller over a MemoryKube holding the example ServiceConfiguration ``default``; every write echoed
    into the caches."""

    def __init__(self) -> None:
        self.kube = MemoryKube()
        settings = Settings(name="default", namespace=NAMESPACE, tls_validity=timedelta(days=365), resync_seconds=3600)
        self.controller = c = ConfigController(self.kube, settings, SnapshotHub("test"), EventRecorder(self.kube, "t"))
        managed = {path.rpartition("/")[2]: c.managed[kind] for kind, path in {**ADMISSION_PATHS, **RBAC_PATHS}.items()}
        managed |= {path.rpartition("/")[2]: c.managed[kind] for kind, path in policies.PATHS.items()}
        self.echo = Echo(
            self.kube, {**managed, "serviceconfigurations": c.configs, "tenants": c.tenants, "tenantowners": c.owners}
        )

    async def seed(self) -> None:
        """The documented example (both webhook configurations, TLS kept by Enclave, RBAC), its webhooks sparing
        kube-system as the validation requires of a Fail webhook on everything."""
        body = example("ServiceConfiguration")
        body["metadata"]["generation"] = 1
        spare = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        for side in ("mutating", "validating"):
            for webhook in body["spec"]["admission"][side]["webhooks"]:
                webhook["namespaceSelector"] = {"matchExpressions": [spare]}
        await self.kube.create(CONFIGS, body)
        self.echo()

    def ready(self) -> bool:
        status = self.kube.objects[f"{CONFIGS}/default"].get("status") or {}
        return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or ())

    def written(self, plural: str) -> list[str]:
        return sorted(path.rpartition("/")[2] for path in self.kube.objects if f"/{plural}/" in path)


@asynccontextmanager
async def leading(config: Config) -> AsyncIterator[None]:
    config.controller.set_leading(True)
    try:
        async with running(config.controller.loop):
            yield
    finally:
        config.controller.secrets.stop()


def _errors() -> float:
    return REGISTRY.get_sample_value("enclave_config_reconciles_total", {"result": "error"}) or 0.0


async def test_the_config_loop_converges_and_a_settled_pass_writes_nothing() -> None:
    config = Config()
    await config.seed()
    config.controller.set_leading(True)
    try:
        await settle(config.controller.reconcile, config.echo)
        assert config.ready()
        assert config.written("validatingwebhookconfigurations")
        assert config.written("mutatingwebhookconfigurations")
        assert config.written("clusterroles")
        assert config.written("secrets")
        result = await config.controller.reconcile()
        assert config.echo() == []
        assert result.requeue_after is not None  # the next certificate check
        assert result.requeue_after > 3600
    finally:
        config.controller.secrets.stop()


async def test_a_follower_publishes_the_configuration_and_writes_nothing() -> None:
    config = Config()
    await config.seed()
    try:
        await config.controller.reconcile()
        assert config.controller.last_good is not None
        assert config.echo() == []
    finally:
        config.controller.secrets.stop()


async def test_a_failed_config_pass_backs_off_and_is_retried() -> None:
    config = Config()
    await config.seed()
    outage = Outage(lambda method, _: method != "GET")  # the first pass's first write: the serving Secret
    config.kube.fail = outage
    config.echo.live()
    errors = _errors()
    async with leading(config):
        await poll_async(config.ready, what="the configuration applied after a failed pass")
    assert _errors() == errors + 1
    assert outage.times[1] - outage.times[0] >= 0.5  # the backoff, not the next change, brought the retry
