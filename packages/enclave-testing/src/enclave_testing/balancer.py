"""A round-robin TCP balancer on loopback: several admission replicas behind one webhook URL.

In a cluster, kube-apiserver reaches admission through a Service whose endpoints are every replica; locally
there is no Service, so tests that need kube-apiserver to spread reviews over replicas put this in front of
them. Each new connection goes to the next backend that accepts one (a stopped replica is skipped, as
kube-proxy skips an endpoint that is gone); bytes are piped both ways untouched, so TLS is end to end between
kube-apiserver and the replica. Runs its own event loop in a daemon thread, so synchronous tests can use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Self


class LoopThread(ABC):
    """A server of the test's own on an event loop in a daemon thread: ``with`` runs ``_start`` there (which sets
    ``port``) and, on the way out, ``_stop``, then ends the thread. Synchronous tests use it as they would a
    process."""

    def __init__(self, name: str) -> None:
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @abstractmethod
    async def _start(self) -> None:
        """Start serving on the thread's loop (set ``port``)."""

    @abstractmethod
    async def _stop(self) -> None:
        """Stop serving; the loop is stopped after."""


class Balancer(LoopThread):
    """``with Balancer(ports) as balancer: ... balancer.port``."""

    def __init__(self, ports: Sequence[int], host: str = "127.0.0.1") -> None:
        super().__init__("balancer")
        self.ports = list(ports)
        self.host = host
        self.connections: dict[int, int] = dict.fromkeys(self.ports, 0)
        """Connections handed to each backend port so far."""
        self._next = itertools.cycle(range(len(self.ports)))
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):  # ends every pipe: each sees end-of-stream and closes its other side
            writer.close()
        pipes = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        await asyncio.wait(pipes, timeout=2) if pipes else None

    async def _backend(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for _ in self.ports:
            port = self.ports[next(self._next)]
            try:
                streams = await asyncio.open_connection(self.host, port)
            except OSError:
                continue
            self.connections[port] += 1
            return streams
        return None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = await self._backend()
        if backend is None:
            writer.close()
            return
        upstream_reader, upstream_writer = backend
        self._writers |= {writer, upstream_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
        self._writers -= {writer, upstream_writer}
