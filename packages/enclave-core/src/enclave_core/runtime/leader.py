"""One active replica per controller, chosen through a coordination.k8s.io Lease.

Built on ``kubernetes.aio.leaderelection``; we add what a rolling update needs: the work is cancelled when
the lease is lost, the replica stands for election again instead of dying, and a replica that shuts down
releases the lease so its successor takes over within one retry period rather than one lease duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from kubernetes.aio import client
from kubernetes.aio.leaderelection import electionconfig, leaderelection
from kubernetes.aio.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)


class LeaderElector:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        self.api = api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.leading = False

    async def run(self, work: Callable[[], Awaitable[None]], on_change: Callable[[bool], None]) -> None:
        """Run ``work`` whenever this replica leads; until cancelled."""
        await self._ensure_namespace_exists()
        try:
            while True:

                async def lead() -> None:
                    self.leading = True
                    on_change(True)
                    log.info("became leader", extra={"lease": self.name, "identity": self.identity})
                    await work()

                async def stopped() -> None:
                    self.leading = False
                    on_change(False)
                    log.warning("lost leadership", extra={"lease": self.name, "identity": self.identity})

                config = electionconfig.Config(
                    LeaseLock(self.name, self.namespace, self.identity, self.api),
                    self.lease_duration,
                    self.renew_deadline,
                    self.retry_period,
                    lead,
                    stopped,
                )
                await leaderelection.LeaderElection(config).run()
                await asyncio.sleep(self.retry_period)
        finally:
            if self.leading:
                await self.release()

    async def release(self) -> None:
        """Hand the lease over at once on a graceful shutdown."""
        coordination = client.CoordinationV1Api(self.api)
        with contextlib.suppress(Exception):
            lease = await coordination.read_namespaced_lease(self.name, self.namespace)
            if lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = ""
                lease.spec.lease_duration_seconds = 1
                lease.spec.renew_time = datetime.now(UTC)
                await coordination.replace_namespaced_lease(self.name, self.namespace, lease)
                log.info("released leadership", extra={"lease": self.name})
        self.leading = False

    async def _ensure_namespace_exists(self) -> None:
        core = client.CoreV1Api(self.api)
        try:
            await core.read_namespace(self.namespace)
        except client.ApiException as err:
            if err.status != 404:
                raise
            with contextlib.suppress(client.ApiException):
                await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace)))
