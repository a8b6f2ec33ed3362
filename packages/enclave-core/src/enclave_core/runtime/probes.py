"""Liveness, readiness and Prometheus metrics on one small HTTP listener per process.

Readiness is a set of named gates that the component opens as it gets ready (leader elected or standing by,
snapshots received, caches synced); ``/readyz`` lists the closed ones, which is what an operator wants to see
when a pod stays unready.

A check may also be *reported only* (``gating=False``): it is shown, but the process stays ready while it fails.
That is how admission keeps deciding for every hook while an optional publisher is away: the hooks that read its
snapshot fail closed on their own, and ``/readyz`` says which (docs/architecture.md, "Who an outage blocks").
``/readyz`` answers ``ok`` when every check passes, ``ok; degraded: <check> (<detail>)`` when only
reported-only checks fail (still 200), and ``not ready: <check> (<detail>), ...`` (503) otherwise;
``/readyz?verbose`` lists every check, one a line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from enclave_core.runtime.options import HostPort


@dataclass(frozen=True)
class _Check:
    check: Callable[[], bool]
    gating: bool
    detail: Callable[[], str] | None


class Readiness:
    """Named readiness gates; the process is ready when every registered gate is open."""

    def __init__(self) -> None:
        self._gates: dict[str, bool] = {}
        self._checks: dict[str, _Check] = {}

    def __contains__(self, name: str) -> bool:
        """Whether gate or check ``name`` is registered (a component adds its gates as its body starts)."""
        return name in self._gates or name in self._checks

    def add(self, name: str, ready: bool = False) -> None:
        self._gates.setdefault(name, ready)

    def set(self, name: str, ready: bool = True) -> None:
        self._gates[name] = ready

    def add_check(
        self,
        name: str,
        check: Callable[[], bool],
        *,
        gating: bool = True,
        detail: Callable[[], str] | None = None,
    ) -> None:
        """A gate computed on demand (e.g. 'the snapshot is younger than X'). ``gating=False``: reported in the
        answer but never closes readiness; ``detail`` says why it fails (shown next to its name)."""
        self._checks[name] = _Check(check, gating, detail)

    def _failing(self, gating: bool) -> list[str]:
        failing = [name for name, ready in self._gates.items() if not ready] if gating else []
        for name, entry in self._checks.items():
            if entry.gating != gating:
                continue
            try:
                passed = entry.check()
            except Exception:  # a failing check is a closed gate, never a crashed probe
                passed = False
            if not passed:
                failing.append(name)
        return sorted(failing)

    def not_ready(self) -> list[str]:
        """The closed gates."""
        return self._failing(gating=True)

    def degraded(self) -> list[str]:
        """Reported-only checks that fail (the process is still ready)."""
        return self._failing(gating=False)

    def describe(self, name: str) -> str:
        """``name`` with why it fails, when its check can say."""
        entry = self._checks.get(name)
        if entry is None or entry.detail is None:
            return name
        try:
            detail = entry.detail()
        except Exception:
            return name
        return f"{name} ({detail})" if detail else name

    def verbose(self) -> list[str]:
        """Every gate and check, one a line: ``[+]name ok`` or ``[-]name <why>`` (``, not gating`` when it
        does not close readiness)."""
        closed, degraded = set(self.not_ready()), set(self.degraded())
        lines = []
        for name in sorted({*self._gates, *self._checks}):
            entry = self._checks.get(name)
            gating = entry is None or entry.gating
            if name in closed or name in degraded:
                why = self.describe(name).removeprefix(name).strip(" ()") or "failed"
                lines.append(f"[-]{name} {why}" + ("" if gating else ", not gating"))
            else:
                lines.append(f"[+]{name} ok")
        return lines

    @property
    def ready(self) -> bool:
        return not self.not_ready()


class ProbeServer:
    """Serves /healthz, /readyz and /metrics."""

    def __init__(self, address: HostPort, readiness: Readiness, registry: CollectorRegistry = REGISTRY) -> None:
        self.address = address
        self.readiness = readiness
        self.registry = registry
        self.alive = True
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/livez", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n" if self.alive else "shutting down\n", status=200 if self.alive else 503)

    async def _readyz(self, request: web.Request) -> web.Response:
        readiness = self.readiness
        closed = readiness.not_ready()
        degraded = readiness.degraded()
        text = ("not ready: " + ", ".join(readiness.describe(name) for name in closed)) if closed else "ok"
        if degraded:
            text += "; degraded: " + ", ".join(readiness.describe(name) for name in degraded)
        if "verbose" in request.query:
            text += "\n" + "\n".join(readiness.verbose())
        return web.Response(text=text + "\n", status=503 if closed else 200)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.address.host, self.address.port).start()

    async def stop(self) -> None:
        self.alive = False
        if self._runner is not None:
            await self._runner.cleanup()
