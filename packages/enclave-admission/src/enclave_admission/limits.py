"""Flags (with ``ENCLAVE_*`` twins) for what one admission replica accepts: how many connections, how many
request bytes at once, and whose client certificates.

Kept apart from :mod:`enclave_admission.listener` (compiled, per-request code) so that the listener stays free of
argparse; ``__main__`` turns the flags into a :class:`~enclave_admission.listener.Limits`.
"""

from __future__ import annotations

import argparse

from enclave_admission import conversion
from enclave_admission.listener import Limits
from enclave_core.runtime.options import env_default


def add_limit_flags(parser: argparse.ArgumentParser) -> None:
    default = Limits()
    parser.add_argument(
        "--max-connections",
        type=int,
        default=int(env_default("ENCLAVE_MAX_CONNECTIONS", str(default.max_connections))),
        help="open webhook connections per replica; more are closed at once "
        f"(env ENCLAVE_MAX_CONNECTIONS, default {default.max_connections})",
    )
    parser.add_argument(
        "--max-buffered-bytes",
        type=int,
        default=int(env_default("ENCLAVE_MAX_BUFFERED_BYTES", str(default.max_buffered))),
        help="request body bytes all connections together may hold; a request that would exceed it is answered "
        f"503 (env ENCLAVE_MAX_BUFFERED_BYTES, default {default.max_buffered}, keep well under the memory limit)",
    )


def limits_from(args: argparse.Namespace) -> Limits:
    names = frozenset(name.strip() for name in (args.client_allowed_names or "").split(",") if name.strip())
    if args.max_connections < 1 or args.max_buffered_bytes < 1:
        raise SystemExit("--max-connections and --max-buffered-bytes must be positive")
    return Limits(
        max_connections=args.max_connections,
        max_buffered=args.max_buffered_bytes,
        client_names=names,
        require_client_certificate=bool(args.client_ca_file),
        # kube-apiserver sends no client certificate to conversion webhooks; /convert answers from the request
        # alone (no snapshot, no write, no Event), so serving it to a caller without one gives nothing away.
        open_paths=frozenset({conversion.PATH}),
    )
