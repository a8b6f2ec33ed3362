"""Child processes that never outlive us: the one place that knows how to start and stop a server process.

Control-plane binaries and Enclave components alike run as children with their output in a log file. Each
child gets PR_SET_PDEATHSIG so that a test runner killed hard (CI timeout, Ctrl-C twice) leaves no strays.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A loopback port that is free now, chosen below the kernel's ephemeral range.

    An ephemeral port can be taken between the check and the child's bind by any outgoing connection, and
    worse by a client reconnecting to that very port while its server restarts: connecting to a local port
    with no listener can pick the same port as the source and connect to itself (TCP simultaneous open),
    after which the restarted server cannot bind. Seen once in CI on a gRPC publisher restart. Ports below
    the range are never assigned implicitly, and none is handed out twice in a session.
    """
    low, _ = _ephemeral_range()
    candidates = list(range(max(1024, low - 20000), low))
    random.shuffle(candidates)
    for port in candidates:
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port below {low}")


@dataclass
class ManagedProcess:
    """A started child process with its log file."""

    name: str
    args: Sequence[str]
    log_path: Path
    env: dict[str, str] | None = None
    cwd: Path | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)

    def start(self) -> ManagedProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.popen = subprocess.Popen(
            list(self.args),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        return self

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM for a graceful shutdown, SIGKILL if it does not come in time."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    alive: ManagedProcess | None = None,
) -> None:
    """Poll ``check`` until it is true; fail early when the process it waits on has died."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if check():
                return
        if alive is not None and not alive.running:
            raise RuntimeError(f"{alive.name} exited while waiting for {what}:\n{alive.log_tail()}")
        if time.monotonic() > deadline:
            tail = f"\n{alive.name} log:\n{alive.log_tail()}" if alive is not None else ""
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}{tail}")
        time.sleep(interval)
