"""Options shared by every component: each flag has an ``ENCLAVE_*`` environment twin and a sane default."""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from enclave_core.durations import parse_duration


def env_default(env: str, default: str) -> str:
    return os.environ.get(env, default)


def env_flag(env: str, default: bool) -> bool:
    raw = os.environ.get(env)
    return default if raw is None else raw.strip().lower() in {"1", "true", "yes", "on"}


def add_env_option(
    parser: argparse.ArgumentParser,
    flag: str,
    default: str,
    help: str,
    *,
    type: Callable[[str], Any] | None = None,
    env: str = "",
) -> None:
    """``--<flag>`` with its environment twin (``env``, by default ``ENCLAVE_<FLAG>`` with dashes as underscores)
    filling the default and named at the end of ``help``, so the twin cannot be misspelt or left out of the help
    (and the README's table)."""
    env = env or "ENCLAVE_" + flag.upper().replace("-", "_")
    raw = env_default(env, default)
    if type is None:
        parser.add_argument(f"--{flag}", default=raw, help=f"{help} (env {env})")
    else:
        parser.add_argument(f"--{flag}", type=type, default=type(raw), help=f"{help} (env {env})")


def add_env_switch(parser: argparse.ArgumentParser, flag: str, default: bool, help: str, *, env: str = "") -> None:
    """``--<flag>``/``--no-<flag>`` with its environment twin (as :func:`add_env_option`; read by :func:`env_flag`)."""
    env = env or "ENCLAVE_" + flag.upper().replace("-", "_")
    parser.add_argument(
        f"--{flag}", action=argparse.BooleanOptionalAction, default=env_flag(env, default), help=f"{help} (env {env})"
    )


def add_concurrency_flag(parser: argparse.ArgumentParser, default: int, help: str) -> None:
    """``--concurrency``: how many writes (or objects) a controller keeps in flight."""
    add_env_option(parser, "concurrency", str(default), help, type=int)


def add_controller_flags(parser: argparse.ArgumentParser, *, concurrency: int, concurrency_help: str) -> None:
    """``--resync`` (a full pass without changes, default 60s) and ``--concurrency`` (writes in flight), the
    flags of a level-based controller; check them with :func:`check_controller_flags` after parsing."""
    add_resync_flag(parser)
    add_concurrency_flag(parser, concurrency, concurrency_help)


def add_resync_flag(parser: argparse.ArgumentParser) -> None:
    """``--resync`` alone, for a controller whose writes are not fanned out (no ``--concurrency`` to offer)."""
    add_env_option(parser, "resync", "60s", "period of a full pass without changes")


def check_duration(parser: argparse.ArgumentParser, args: argparse.Namespace, flag: str) -> timedelta:
    """The duration flag ``--<flag>`` parsed, or exit 2 naming the flag (``parser.error``): a typo in a
    duration is refused at start, not found at the first timer."""
    try:
        return parse_duration(getattr(args, flag.replace("-", "_")))
    except ValueError as err:
        parser.error(f"--{flag}: {err}")


def check_resync_flag(parser: argparse.ArgumentParser, args: argparse.Namespace) -> float:
    """Refuse a bad ``--resync`` (exit 2 with the flag named); return it in seconds."""
    return check_duration(parser, args, "resync").total_seconds()


def check_controller_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> float:
    """Refuse a bad ``--resync`` or ``--concurrency`` (exit 2 with the flag named); return the resync seconds."""
    seconds = check_resync_flag(parser, args)
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    return seconds


def parse_controller_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """A controller's flags parsed and its ``--resync`` and ``--concurrency`` checked (exit 2 with the flag
    named), the resync in seconds as ``resync_seconds`` (the name its ``Settings`` field has)."""
    args = parser.parse_args(argv)
    args.resync_seconds = check_controller_flags(parser, args)
    return args


SettingsT = TypeVar("SettingsT")


def settings_from(settings: type[SettingsT], args: argparse.Namespace, **given: Any) -> SettingsT:
    """A component's ``Settings`` dataclass from its parsed flags: each field a flag of the same name parsed
    (``--batch-size`` is ``batch_size``), then ``given`` for what no flag says as it is (a default resolved, a
    value computed from several flags)."""
    from_flags = {
        field.name: getattr(args, field.name)
        for field in dataclasses.fields(settings)  # type: ignore[arg-type]  # a dataclass, not any type
        if field.init and hasattr(args, field.name)
    }
    return settings(**{**from_flags, **given})


PYTHON_GC_THRESHOLDS = "700,10,10"
"""CPython's own collector thresholds (``gc.get_threshold()``): the default of ``--gc-thresholds``."""


def gc_thresholds(value: str) -> tuple[int, int, int]:
    """``--gc-thresholds`` as the three numbers ``gc.set_threshold`` takes."""
    parts = value.split(",")
    if len(parts) != 3 or not all(part.strip().isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"{value!r}: want three whole numbers, e.g. 700,10,10")
    first, second, third = (int(part) for part in parts)
    return first, second, third


def add_interpreter_flags(parser: argparse.ArgumentParser, *, gc: str = PYTHON_GC_THRESHOLDS) -> None:
    """``--log-level``, ``--log-format``, ``--event-loop`` and ``--gc-thresholds``: what applies to the whole
    interpreter (every component has them; ``enclave-host`` takes them once for all it hosts)."""
    add_env_option(parser, "log-level", "info", "debug, info, warning or error")
    parser.add_argument(
        "--log-format",
        choices=["json", "text"],
        default=env_default("ENCLAVE_LOG_FORMAT", "json"),
        help="one JSON object per line, or text for a terminal (env ENCLAVE_LOG_FORMAT)",
    )
    parser.add_argument(
        "--event-loop",
        choices=["uvloop", "asyncio"],
        default=env_default("ENCLAVE_EVENT_LOOP", "uvloop"),
        help="uvloop (libuv, and TLS without a Python layer) or the stdlib loop (env ENCLAVE_EVENT_LOOP)",
    )
    parser.add_argument(
        "--gc-thresholds",
        type=gc_thresholds,
        default=env_default("ENCLAVE_GC_THRESHOLDS", gc),
        help="the cyclic garbage collector's thresholds, gen0,gen1,gen2 as gc.set_threshold takes them "
        f"(env ENCLAVE_GC_THRESHOLDS, default {gc})",
    )


def add_common_flags(
    parser: argparse.ArgumentParser,
    *,
    probe_port: int,
    leader_election: bool = True,
    gc: str = PYTHON_GC_THRESHOLDS,
) -> None:
    """Flags every process has. Environment variables fill the defaults so a Helm chart can set either.

    ``gc`` is the component's default for ``--gc-thresholds`` (a controller that holds large caches raises it).
    """
    add_env_option(parser, "kubeconfig", "", "kubeconfig path; empty means in-cluster configuration", env="KUBECONFIG")
    add_env_option(
        parser, "namespace", "enclave-system", "the namespace Enclave runs in: TLS secret, leases, events of its own"
    )
    add_env_option(parser, "probe-address", f"0.0.0.0:{probe_port}", "host:port serving /healthz, /readyz and /metrics")
    add_interpreter_flags(parser, gc=gc)
    if leader_election:
        add_env_switch(
            parser,
            "leader-elect",
            True,
            "run as one active replica behind a Lease; off only for single-replica development",
        )
        timings = {
            "lease-duration": ("15", "seconds a standby waits after the Lease last changed before taking it"),
            "renew-deadline": (
                "10",
                "seconds the leader keeps writing without a successful renewal (< lease duration)",
            ),
            "retry-period": ("2", "seconds between Lease attempts (< renew deadline)"),
        }
        for flag, (default, what) in timings.items():
            env = "ENCLAVE_" + flag.upper().replace("-", "_")
            parser.add_argument(
                f"--{flag}", type=float, default=float(env_default(env, default)), help=f"{what} (env {env})"
            )
        parser.add_argument(
            "--identity",
            default=env_default("ENCLAVE_IDENTITY", f"{socket.gethostname()}-{os.getpid()}"),
            help="this replica's name in the Lease (env ENCLAVE_IDENTITY, default host-pid)",
        )


@dataclass(frozen=True)
class HostPort:
    host: str
    port: int

    @classmethod
    def parse(cls, value: str) -> HostPort:
        host, _, port = value.rpartition(":")
        return cls(host or "0.0.0.0", int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"
