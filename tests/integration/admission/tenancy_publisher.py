"""A TenantService for the admission tests, as its own process: serves what it reads on stdin.

Each stdin line is a TenancySnapshot in JSON, or ``Rules <RulesSnapshot JSON>``; it is published and answered
on stdout with ``revision <n>``.
The first stdout line is ``port <n>``. A process of its own keeps grpc.aio's event loop away from pytest's.
"""

from __future__ import annotations

import asyncio
import sys

from enclave_core.proto.enclave.tenants.v1 import tenants_pb2_grpc
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.rules import RULES_KIND, RulesSnapshot
from enclave_core.snapshots.server import SnapshotServer
from enclave_core.snapshots.tenancy import TENANCY_KIND


async def main() -> None:
    hub = SnapshotHub("test-tenants")
    server = SnapshotServer("127.0.0.1:0")
    server.add(tenants_pb2_grpc.add_TenantServiceServicer_to_server, hub, "TenantService")
    hub.publish(RULES_KIND, RulesSnapshot().payload())  # no rules: these tests are about namespaces
    await server.start()
    print(f"port {server.port}", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        kind, payload = (RULES_KIND, line[len("Rules ") :]) if line.startswith("Rules ") else (TENANCY_KIND, line)
        published = hub.publish(kind, payload.strip().encode(), only_if_changed=False)
        print(f"revision {published.revision if published else 0}", flush=True)
    await server.stop(0.1)


if __name__ == "__main__":
    asyncio.run(main())
