"""The HTTPS side: AdmissionReview in, decision out, with metrics, one log line per decision and deny Events.

No framework: :mod:`enclave_admission.listener` hands each whole request to :meth:`AdmissionServer.answer`,
and the route table (:data:`enclave_admission.routes.ROUTES`) is the only dispatch. A path that is not in it
is answered ``404`` with a body naming the served paths.
kube-apiserver treats that as a failed call (the webhook's failurePolicy decides), so a misconfigured path can
never turn into an allow.

A request before the core snapshots (configuration, Tenancy, Rules) arrived is answered ``503`` for the same
reason: no state, no decision. ``/convert`` (CRD conversion, :mod:`enclave_admission.conversion`) is the
exception: it needs no state. An optional snapshot (Replication, QuotaTargets, Pools, GlobalQuotas) that is
missing or past ``--snapshot-staleness`` stops only the paths that read it (:data:`routes.SNAPSHOTS`): a
fail-closed hook denies with reason ``SnapshotStale`` naming the snapshot, a fail-open one answers ``503``
(kube-apiserver then lets the request through, as when the hook is down). Everything else keeps deciding.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Final

import orjson

from enclave_admission import conversion
from enclave_admission.events import DenyEvents
from enclave_admission.listener import Answer, Limits, Listener
from enclave_admission.review import AdmissionRequest, Decision, MalformedReviewError, response
from enclave_admission.routes import FAILS_OPEN, ROUTES, SNAPSHOTS, SPARES_COMPONENTS, Handler
from enclave_admission.state import Role, State
from enclave_core.runtime.logs import HotLines
from enclave_core.runtime.loopmetrics import CounterChild, LoopCounter, LoopHistogram
from enclave_core.snapshots.globalquotas import GLOBALQUOTAS_KIND
from enclave_core.snapshots.pools import POOLS_KIND
from enclave_core.snapshots.quotas import QUOTAS_KIND
from enclave_core.snapshots.replication import REPLICATION_KIND
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX

log = logging.getLogger("enclave_admission.decisions")
decisions = HotLines(log.name)

UNKNOWN_PATH: Final = "unknown"
# Updated once per review from the event loop only: lock-free (see enclave_core.runtime.loopmetrics).
REQUESTS = LoopCounter("enclave_admission_requests_total", "AdmissionReview requests received", ["path"])
DECISIONS = LoopCounter(
    "enclave_admission_decisions_total",
    "Decisions by path and result (allowed, patched, denied, error)",
    ["path", "result"],
)
LATENCY = LoopHistogram(
    "enclave_admission_request_duration_seconds",
    "Time from reading the request to writing the answer, per path",
    ["path"],
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)


def _error(status: int, message: str) -> Answer:
    return status, orjson.dumps({"error": message})


class _PathMetrics:
    """The metric children of one path, looked up once rather than per review."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.requests = REQUESTS.labels(path)
        self.latency = LATENCY.labels(path)
        self._decisions: dict[str, CounterChild] = {}

    def decided(self, result: str) -> None:
        child = self._decisions.get(result)
        if child is None:
            child = self._decisions[result] = DECISIONS.labels(self.path, result)
        child.inc()


STALE_REASON: Final = "SnapshotStale"


class Freshness:
    """Why each optional snapshot cannot be relied on right now ('' when it can): the subscribers' view of
    their publishers (never accepted, or past the staleness bound), asked once per review of a path that reads
    the snapshot."""

    def __init__(self) -> None:
        self._why: dict[str, Callable[[], str]] = {}

    def watch(self, kind: str, unavailable: Callable[[], str]) -> None:
        self._why[kind] = unavailable

    def unavailable(self, kind: str) -> str:
        why = self._why.get(kind)
        return why() if why is not None else ""


class AdmissionServer:
    """Answers AdmissionReviews on the paths of ``routes`` from ``state``."""

    def __init__(
        self,
        state: State,
        events: DenyEvents | None = None,
        routes: dict[str, Handler] | None = None,
        freshness: Freshness | None = None,
    ) -> None:
        self.state = state
        self.events = events
        self.routes = ROUTES if routes is None else routes
        self.freshness = freshness or Freshness()
        self._metrics = {path: _PathMetrics(path) for path in self.routes}
        self._listener: Listener | None = None
        self.port = 0

    def core_ready(self) -> bool:
        """The snapshots every hook reads (configuration, Tenancy, Rules) arrived: decisions can be made."""
        state = self.state
        return (
            state.config is not None
            and (state.tenancy_received or not state.expect_tenancy)
            and (state.rules_received or not state.expect_rules)
        )

    def _received(self, kind: str) -> bool:
        """Whether ``kind`` is subscribed to and not in yet (False), or in or not subscribed to at all (True: the
        hook then decides from the empty snapshot, as when its component is not installed)."""
        state = self.state
        if kind == REPLICATION_KIND:
            return state.replication_received or not state.expect_replication
        if kind == QUOTAS_KIND:
            return state.quotas is not None or not state.expect_quotas
        if kind == POOLS_KIND:
            return state.pools_received or not state.expect_pools
        if kind == GLOBALQUOTAS_KIND:
            return state.globalquotas_received or not state.expect_globalquotas
        return True

    def unavailable(self, path: str) -> str:
        """Why ``path`` cannot decide now (a snapshot it reads is missing or stale); empty when it can."""
        for kind in SNAPSHOTS.get(path, ()):
            if not self._received(kind):
                return f"no {kind} snapshot yet"
            why = self.freshness.unavailable(kind)
            if why:
                return why
        return ""

    def answer(self, method: str, path: str, body: bytes, trusted: bool = True) -> Answer | Awaitable[Answer]:
        """The whole exchange for one request: never raises, and nothing but a decision is ever an allow.

        Decisions from memory are answered at once; a handler that must write (a quota reservation,
        :mod:`enclave_admission.reservation`) or wait returns an awaitable, and so does this, which the
        listener writes when it completes (in request order). The handler's decision is the whole decision:
        this adds the answer, its metrics, its log line and its deny or audit Events, nothing else.

        ``trusted`` is False for a caller the listener could not authenticate (client authentication on, no
        certificate): it gets conversion and nothing else, so no forged review ever reaches a decision, a
        ledger reservation or a deny Event. The listener refuses such requests before their body already; this
        is the same rule where the writes are. With client authentication off every caller is trusted, and the
        NetworkPolicy is what keeps strangers from the port (docs/architecture.md, "Who may call admission")."""
        if path == conversion.PATH and path not in self.routes:
            return conversion.answer(method, body)
        if not trusted:
            return _error(403, "a client certificate is required for this path; without one only /convert is served")
        handler = self.routes.get(path)
        if handler is None:
            REQUESTS.labels(UNKNOWN_PATH).inc()
            DECISIONS.labels(UNKNOWN_PATH, "error").inc()
            served = ", ".join(sorted([*self.routes, conversion.PATH]))
            log.warning("request on an unknown path", extra={"path": path})
            return _error(404, f"no Enclave webhook is served on {path!r}; served paths: {served}")
        metrics = self._metrics[path]
        metrics.requests.inc()
        started = time.perf_counter()
        if method != "POST":
            metrics.decided("error")
            return _error(405, f"{path} accepts POST of an AdmissionReview, not {method}")
        if not self.core_ready():
            metrics.decided("error")
            return _error(503, "the admission server has not received its configuration snapshot yet")
        stale = self.unavailable(path)
        if stale and path in FAILS_OPEN:
            metrics.decided("error")
            return _error(503, f"{stale}; {path} does not decide until it is fresh")
        try:
            request = AdmissionRequest.from_review(orjson.loads(body))
        except (ValueError, MalformedReviewError, AttributeError, TypeError) as err:
            # orjson.JSONDecodeError is a ValueError; the others: a field of the wrong JSON type
            metrics.decided("error")
            return _error(400, f"malformed AdmissionReview: {err}")
        if stale and not self._spared(path, request):
            # a fail-closed hook: refused, saying which snapshot, while every other hook decides on
            message = f"{stale}; this webhook ({path}) refuses every request until it is fresh (fail closed)"
            return self._finish(path, metrics, request, Decision.deny(STALE_REASON, message), started)
        try:
            decided = handler(request, self.state)
        except Exception:
            log.exception("decision failed", extra={"path": path, "uid": request.uid})
            metrics.decided("error")
            return _error(500, "internal error while deciding; see the admission server's log")
        if isinstance(decided, Decision):  # mypy narrows a NamedTuple by its class, not by ``tuple``
            return self._finish(path, metrics, request, decided, started)
        return self._later(path, metrics, request, decided, started)

    def _spared(self, path: str, request: AdmissionRequest) -> bool:
        """Whether ``path`` decides ``request`` without its snapshot anyway: the replication hook lets Enclave's
        own components (the service accounts of its namespace) and ignored users through whatever the snapshot
        says, so a stale Replication snapshot must not stop enclave-tenants' or enclave-replication's writes."""
        if path not in SPARES_COMPONENTS:
            return False
        state = self.state
        if state.namespace and request.username.startswith(f"{SERVICE_ACCOUNT_PREFIX}{state.namespace}:"):
            return True
        return state.subject(request.username, request.groups).role is Role.IGNORED

    async def _later(
        self, path: str, metrics: _PathMetrics, request: AdmissionRequest, pending: Awaitable[Decision], started: float
    ) -> Answer:
        try:
            decision = await pending
        except Exception:
            log.exception("decision failed", extra={"path": path, "uid": request.uid})
            metrics.decided("error")
            return _error(500, "internal error while deciding; see the admission server's log")
        return self._finish(path, metrics, request, decision, started)

    def _finish(
        self, path: str, metrics: _PathMetrics, request: AdmissionRequest, decision: Decision, started: float
    ) -> Answer:
        payload = orjson.dumps(response(request.uid, decision))
        elapsed = time.perf_counter() - started
        metrics.decided(decision.result)
        metrics.latency.observe(elapsed)
        if log.isEnabledFor(logging.INFO):
            self._log(path, request, decision, elapsed)  # a line per decision, batched (see HotLines)
        if not decision.allowed and self.events is not None and self.state.config is not None:
            self.events.post(request, decision, self.state.config.spec.events.namespace)
        if decision.audits and self.events is not None and self.state.config is not None and not request.dry_run:
            self.events.audit(request, decision, self.state.config.spec.events.namespace)
        return 200, payload

    @staticmethod
    def _log(path: str, request: AdmissionRequest, decision: Decision, elapsed: float) -> None:
        fields = {
            "path": path,
            "uid": request.uid,
            "operation": request.operation,
            "resource": f"{request.resource}/{request.sub_resource}" if request.sub_resource else request.resource,
            "object": request.name,
            "namespace": request.namespace,
            "user": request.username,
            "result": decision.result,
            "reason": decision.reason,
            "tenant": decision.tenant,
            "dry_run": request.dry_run,
            "duration_ms": round(elapsed * 1000, 3),
        }
        if not decision.allowed:
            fields["detail"] = decision.message
        decisions.info("decision", fields)

    async def start(
        self, host: str, port: int, ssl_context: ssl.SSLContext | None, limits: Limits | None = None
    ) -> None:
        """Listen on ``host:port`` (0: any free port, then read :attr:`port`) with ``ssl_context`` (None,
        plain HTTP, only in tests)."""
        self._listener = Listener(self.answer, limits)
        await self._listener.start(host, port, ssl_context)
        self.port = self._listener.port

    async def stop(self) -> None:
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
