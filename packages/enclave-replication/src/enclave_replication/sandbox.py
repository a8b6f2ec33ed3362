"""Rendering tenants' templates off the event loop, in worker processes with a CPU, memory and wall-time budget.

Why (docs/decisions/0002-replication-templates.md, issue 29): Jinja2's sandbox bounds what a template can
reach, not what it costs. Rendered in the controller's event loop, two nested ``range(100000)`` loops ran for
hours and froze the Lease holder (renewals, probes, every other tenant's replication); ``"x" * 10**10``
allocated ten gigabytes before the output cap could look. Here a template runs in a small pool of long-lived
worker processes (:mod:`enclave_replication.sandbox_worker`), each capped by rlimits, and the pool kills a
worker that outlives its wall-time budget. A killed worker fails that one render with a budget reason and is
replaced; the controller keeps its loop.

* Budgets (:class:`Budget`, flags ``--render-*``): CPU seconds per render (``RLIMIT_CPU`` in the worker),
  memory (``RLIMIT_AS`` above the worker's own size), wall seconds (the pool's timer; a loaded host stretches a
  render's wall time, so it is the generous one), and the number of workers.
* Fairness: a party (the target's tenant) holds at most one worker at a time, so one tenant's many heavy
  templates wait on each other and leave the other workers to everyone else.
* A render that exceeded a budget is remembered (same template, missing-key mode and context) for
  :data:`FAILURE_TTL` seconds: the many events that requeue a replication object do not burn the budget again.
* Workers start on the first render (a standby replica, or a cluster without generators, runs none), all at
  once; a replacement starts as soon as a worker is gone.

:class:`RenderError` reasons: ``RenderCPUBudgetExceeded``, ``RenderMemoryBudgetExceeded``,
``RenderTimeBudgetExceeded``, and ``RenderFailed`` for everything the template itself got wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
import sys
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from prometheus_client import Counter, Histogram

from enclave_core.kube.rest import JSON
from enclave_replication import templates
from enclave_replication.sandbox_worker import HEADER, MEMORY_REASON, READY

log = logging.getLogger(__name__)

CPU_REASON: Final = "RenderCPUBudgetExceeded"
TIME_REASON: Final = "RenderTimeBudgetExceeded"
BUDGET_REASONS: Final = frozenset({CPU_REASON, MEMORY_REASON, TIME_REASON})
MAX_REPLY: Final = 8 * templates.MAX_OUTPUT
"""Bytes of encoded manifests a render may answer with (the text is capped at ``MAX_OUTPUT`` characters; YAML
aliases can still multiply it)."""
FAILURE_TTL: Final = 600.0
FAILURES_KEPT: Final = 512
START_TIMEOUT: Final = 60.0
_ENVIRONMENT: Final = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
"""What a worker inherits of the controller's environment: enough to start Python, nothing else."""

RENDERS = Counter("enclave_replication_renders_total", "Template renders in the worker pool", ["result"])
RENDER_SECONDS = Histogram("enclave_replication_render_seconds", "Wall time of one render in a worker")
WORKERS_STARTED = Counter("enclave_replication_render_workers_started_total", "Render worker processes started")
WORKER_START_SECONDS = Histogram("enclave_replication_render_worker_start_seconds", "Start-up of a render worker")


@dataclass(frozen=True)
class Budget:
    """What one render may cost; the defaults fit a manifest generator with room to spare."""

    cpu_seconds: float = 2.0
    wall_seconds: float = 10.0
    memory_bytes: int = 128 << 20
    workers: int = 2


class _GoneError(Exception):
    """The worker cannot serve again (killed, ended, answered out of protocol): ``reason`` and ``message``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(eq=False)
class _Worker:
    process: asyncio.subprocess.Process

    @property
    def stdin(self) -> asyncio.StreamWriter:
        assert self.process.stdin is not None
        return self.process.stdin

    @property
    def stdout(self) -> asyncio.StreamReader:
        assert self.process.stdout is not None
        return self.process.stdout

    async def read_frame(self) -> bytes:
        (length,) = HEADER.unpack(await self.stdout.readexactly(HEADER.size))
        if length > MAX_REPLY:
            raise _GoneError("RenderFailed", f"the rendered manifests exceed {MAX_REPLY} bytes")
        return await self.stdout.readexactly(length)

    async def exchange(self, request: bytes) -> bytes:
        self.stdin.write(HEADER.pack(len(request)) + request)
        await self.stdin.drain()
        return await self.read_frame()

    def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


@dataclass
class _Party:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class RenderPool:
    """Renders templates into manifests in budgeted worker processes; see the module docstring."""

    def __init__(self, budget: Budget | None = None) -> None:
        self.budget = budget or Budget()
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()
        self._workers: set[_Worker] = set()
        self._starting: set[asyncio.Task[Any]] = set()
        self._started = False
        self._closed = False
        self._parties: dict[str, _Party] = {}
        self._failures: OrderedDict[bytes, tuple[float, templates.RenderError]] = OrderedDict()
        self.replaced = 0
        """Workers started to replace one that was killed or ended."""

    async def render(
        self, template: str, context: Mapping[str, Any], missing_key: str = "zero", party: str = ""
    ) -> list[JSON]:
        """The manifests ``template`` renders to with ``context``; :class:`templates.RenderError` when the
        template fails or exceeds a budget (``reason`` says which)."""
        if self._closed:
            raise RuntimeError("the render pool is closed")
        encoded_context = orjson.dumps(dict(context))
        key = hashlib.sha256(orjson.dumps([template, missing_key]) + encoded_context).digest()
        remembered = self._remembered(key)
        if remembered is not None:
            raise remembered
        request = b"".join(
            (
                b'{"template":',
                orjson.dumps(template),
                b',"missingKey":',
                orjson.dumps(missing_key),
                b',"cpuSeconds":',
                orjson.dumps(self.budget.cpu_seconds),
                b',"context":',
                encoded_context,
                b"}",
            )
        )
        self._ensure_started()
        async with self._turn(party):
            worker = await self._idle.get()
            started = time.monotonic()
            try:
                answer = await self._call(worker, request)
            except templates.RenderError as err:
                RENDERS.labels(err.reason).inc()
                if err.reason in BUDGET_REASONS:
                    self._remember(key, err)
                raise
            finally:
                RENDER_SECONDS.observe(time.monotonic() - started)
        if "error" in answer:
            RENDERS.labels("RenderFailed").inc()
            raise templates.RenderError(str(answer["error"]), str(answer.get("reason") or "RenderFailed"))
        RENDERS.labels("ok").inc()
        documents: list[JSON] = answer["documents"]
        return documents

    async def _call(self, worker: _Worker, request: bytes) -> dict[str, Any]:
        """One exchange; the worker goes back to the idle queue, or is killed and replaced."""
        try:
            async with asyncio.timeout(self.budget.wall_seconds):
                reply = await worker.exchange(request)
            answer: dict[str, Any] = orjson.loads(reply)
        except TimeoutError:
            self._discard(worker)
            raise templates.RenderError(
                f"the template ran past its wall-time budget of {self.budget.wall_seconds:g} s and was stopped",
                TIME_REASON,
            ) from None
        except (asyncio.IncompleteReadError, ConnectionError, orjson.JSONDecodeError):
            # Wait for the exit status before killing: kill() polls, and a poll that reaps the process first
            # leaves asyncio's child watcher reporting 255 instead of the signal.
            error = await self._ended(worker)
            self._discard(worker)
            raise error from None
        except _GoneError as gone:
            self._discard(worker)
            raise templates.RenderError(gone.message, gone.reason) from None
        except BaseException:
            # Cancelled mid-exchange: an answer may still come, so the worker cannot be trusted with the next one.
            self._discard(worker)
            raise
        if answer.get("reason") == MEMORY_REASON:
            self._discard(worker)  # it exits after answering: its heap may be fragmented
        else:
            self._idle.put_nowait(worker)
        return answer

    async def _ended(self, worker: _Worker) -> templates.RenderError:
        """Why a worker stopped answering, from its exit status."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await worker.process.wait()
        code = worker.process.returncode
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            return templates.RenderError(
                f"the template used its CPU budget of {self.budget.cpu_seconds:g} s and was stopped", CPU_REASON
            )
        return templates.RenderError(f"the render worker ended (exit status {code})")

    # -- budgets remembered --------------------------------------------------------------------------------

    def _remembered(self, key: bytes) -> templates.RenderError | None:
        found = self._failures.get(key)
        if found is None:
            return None
        when, error = found
        if time.monotonic() - when > FAILURE_TTL:
            del self._failures[key]
            return None
        return error

    def _remember(self, key: bytes, error: templates.RenderError) -> None:
        self._failures[key] = (time.monotonic(), error)
        self._failures.move_to_end(key)
        while len(self._failures) > FAILURES_KEPT:
            self._failures.popitem(last=False)

    # -- fairness ------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _turn(self, party: str) -> AsyncIterator[None]:
        """At most one worker per party at a time (when the pool has more than one)."""
        if self.budget.workers < 2:
            yield
            return
        entry = self._parties.get(party)
        if entry is None:
            entry = self._parties[party] = _Party()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if not entry.users:
                del self._parties[party]

    # -- workers -------------------------------------------------------------------------------------------

    def _ensure_started(self) -> None:
        if self._started:
            return
        self._started = True
        for _ in range(self.budget.workers):
            self._spawn()

    def _spawn(self) -> None:
        task = asyncio.create_task(self._start_worker(), name="render-worker-start")
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _start_worker(self) -> None:
        """Start one worker, retrying (with a pause) until it answers ready or the pool closes."""
        environment = {name: os.environ[name] for name in _ENVIRONMENT if name in os.environ}
        while not self._closed:
            started = time.monotonic()
            try:
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "enclave_replication.sandbox_worker",
                    str(self.budget.memory_bytes),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    env=environment,
                )
            except OSError as err:
                log.error("render worker cannot be started", extra={"error": repr(err)})
                await asyncio.sleep(1.0)
                continue
            worker = _Worker(process)
            self._workers.add(worker)
            try:
                async with asyncio.timeout(START_TIMEOUT):
                    ready = await worker.read_frame()
                if ready != READY:
                    raise _GoneError("RenderFailed", f"unexpected first frame {ready[:64]!r}")
            except (TimeoutError, asyncio.IncompleteReadError, _GoneError) as err:
                log.warning("render worker did not start", extra={"error": repr(err)})
                worker.kill()
                self._workers.discard(worker)
                await process.wait()
                await asyncio.sleep(1.0)
                continue
            except BaseException:
                worker.kill()
                self._workers.discard(worker)
                raise
            seconds = time.monotonic() - started
            WORKERS_STARTED.inc()
            WORKER_START_SECONDS.observe(seconds)
            log.info("render worker started", extra={"pid": process.pid, "seconds": round(seconds, 3)})
            self._idle.put_nowait(worker)
            return

    def _discard(self, worker: _Worker) -> None:
        """Kill ``worker`` (if still running) and start its replacement."""
        worker.kill()
        self._workers.discard(worker)
        reap = asyncio.create_task(worker.process.wait(), name="render-worker-reap")
        self._starting.add(reap)
        reap.add_done_callback(self._starting.discard)
        if not self._closed:
            self.replaced += 1
            self._spawn()

    @property
    def pids(self) -> list[int]:
        """The worker processes alive now (tests and diagnostics)."""
        return sorted(w.process.pid for w in self._workers if w.process.returncode is None)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._starting):
            task.cancel()
        for worker in list(self._workers):
            worker.kill()
        for worker in list(self._workers):
            with contextlib.suppress(ProcessLookupError):
                await worker.process.wait()
        self._workers.clear()
