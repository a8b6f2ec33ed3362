"""The wait for the Secrets' watches to list is a timed wait that a cancellation stops (enclave-config shutting
down mid-reconcile), even one that arrives as the last watch lists."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from enclave_config.secrets import NamedSecrets
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import resource_path
from enclave_testing.memorykube import MemoryKube
from enclave_testing.waiting import assert_cancel_is_kept


async def test_a_reconcile_cancelled_as_its_secret_watch_lists_stops() -> None:
    def attempt() -> tuple[Coroutine[Any, Any, Any], Callable[[], object]]:
        kube = MemoryKube()
        secrets = NamedSecrets(kube, "enclave", lambda _: None)
        listing = Informer(kube, resource_path("v1", "secrets", namespace="enclave"), name="secret/serving")
        secrets.informers["serving"] = listing  # started, not listed yet: the test says when it has
        return secrets.watch(["serving"]), listing.synced.set

    await assert_cancel_is_kept(attempt)
