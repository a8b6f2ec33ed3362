"""``python -m enclave_replication.sandbox_worker``: one render worker of :mod:`enclave_replication.sandbox`.

Why a process of its own: a tenant's template runs here, not in the controller, so a template that loops for
hours or allocates gigabytes costs this process only. The worker caps itself with rlimits before it reads any
request (argv: the memory budget in bytes):

* ``RLIMIT_AS``: the address space it has after its imports plus the memory budget, so ``"x" * 10**10`` fails
  here with a ``MemoryError`` instead of growing the controller;
* ``RLIMIT_CPU``: before every request, the CPU seconds used so far plus the request's budget; past it the
  kernel sends SIGXCPU, whose default action ends the process (also inside C code, where no Python handler
  would run), and the pool reads the signal from the exit status;
* ``RLIMIT_CORE`` 0: a worker ended by SIGXCPU leaves no core file;
* ``oom_score_adj`` 1000: should the container's memory limit be reached anyway, the kernel ends a worker, not
  the controller.

Frames on stdin/stdout: a 4-byte big-endian length, then JSON. A request is ``{"template", "context",
"missingKey", "cpuSeconds"}``; the answer is ``{"documents": [...]}`` or ``{"error", "reason"}``. After a
``MemoryError`` the worker answers and exits (its heap may be fragmented): the pool starts another.
"""

from __future__ import annotations

import math
import os
import resource
import struct
import sys
from typing import Any, BinaryIO, Final

import orjson

from enclave_replication import templates

HEADER: Final = struct.Struct(">I")
MEMORY_REASON: Final = "RenderMemoryBudgetExceeded"
READY: Final = b'{"ready":true}'


def address_space() -> int:
    """Bytes of address space this process maps now (``VmSize``)."""
    with open("/proc/self/statm", "rb") as statm:
        pages = int(statm.read().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


def read_frame(stream: BinaryIO) -> bytes | None:
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (length,) = HEADER.unpack(header)
    body = stream.read(length)
    return body if len(body) == length else None


def write_frame(stream: BinaryIO, body: bytes) -> None:
    stream.write(HEADER.pack(len(body)) + body)
    stream.flush()


def cap_cpu(seconds: float) -> None:
    """Let the next request use ``seconds`` of CPU (rounded up: the rlimit counts whole seconds)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (math.ceil(used) + max(1, math.ceil(seconds)), hard))


def answer(request: dict[str, Any]) -> tuple[bytes, bool]:
    """The answer frame for one request, and whether the worker should exit after sending it."""
    try:
        text = templates.render(str(request["template"]), request["context"], request["missingKey"])
        documents = templates.manifests(text)
        # Encoded here, within the budget: YAML aliases can make a short output a huge document tree.
        return orjson.dumps({"documents": documents}), False
    except templates.RenderError as err:
        return orjson.dumps({"error": str(err), "reason": err.reason}), False
    except MemoryError:
        return orjson.dumps({"error": "the template exceeded its memory budget", "reason": MEMORY_REASON}), True
    except RecursionError as err:
        return orjson.dumps({"error": f"RecursionError: {err}", "reason": "RenderFailed"}), False


def main(argv: list[str]) -> int:
    memory = int(argv[1])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        with open("/proc/self/oom_score_adj", "w") as adjust:
            adjust.write("1000")
    except OSError:
        pass  # not Linux, or a read-only /proc: the rlimits still hold
    limit = address_space() + memory
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    write_frame(stdout, READY)
    while True:
        frame = read_frame(stdin)
        if frame is None:
            return 0
        request = orjson.loads(frame)
        cap_cpu(float(request["cpuSeconds"]))
        body, leave = answer(request)
        write_frame(stdout, body)
        if leave:
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
