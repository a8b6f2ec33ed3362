"""``/readyz``: gating checks decide the status, reported-only ones are shown without closing readiness, and
every failing check says why."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator

from aiohttp import ClientSession

from enclave_core.runtime.options import HostPort
from enclave_core.runtime.probes import ProbeServer, Readiness


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def probes(readiness: Readiness) -> AsyncIterator[ClientSession]:
    port = _free_port()
    server = ProbeServer(HostPort("127.0.0.1", port), readiness)
    await server.start()
    try:
        async with ClientSession(base_url=f"http://127.0.0.1:{port}") as session:
            yield session
    finally:
        await server.stop()


async def readyz(session: ClientSession, query: str = "") -> tuple[int, str]:
    async with session.get(f"/readyz{query}") as answer:
        return answer.status, await answer.text()


async def test_a_failing_reported_only_check_leaves_the_process_ready_and_says_so() -> None:
    readiness = Readiness()
    core, optional = {"fresh": True}, {"fresh": True}
    readiness.add_check("snapshot:Tenancy", lambda: core["fresh"], detail=lambda: "" if core["fresh"] else "stale")
    readiness.add_check(
        "snapshot:Replication",
        lambda: optional["fresh"],
        gating=False,
        detail=lambda: "" if optional["fresh"] else "the Replication snapshot is stale",
    )
    async with probes(readiness) as session:
        assert await readyz(session) == (200, "ok\n")
        optional["fresh"] = False
        assert readiness.ready
        assert await readyz(session) == (
            200,
            "ok; degraded: snapshot:Replication (the Replication snapshot is stale)\n",
        )
        core["fresh"] = False
        status, body = await readyz(session)
        assert status == 503
        assert body.startswith("not ready: snapshot:Tenancy (stale); degraded: snapshot:Replication")
        status, body = await readyz(session, "?verbose")
        assert body.splitlines()[1:] == [
            "[-]snapshot:Replication the Replication snapshot is stale, not gating",
            "[-]snapshot:Tenancy stale",
        ]


async def test_plain_gates_and_a_raising_check_close_readiness() -> None:
    readiness = Readiness()
    readiness.add("leader-election")

    def broken() -> bool:
        raise RuntimeError("boom")

    readiness.add_check("cache", broken)
    assert readiness.not_ready() == ["cache", "leader-election"]
    readiness.set("leader-election")
    async with probes(readiness) as session:
        assert await readyz(session) == (503, "not ready: cache\n")
