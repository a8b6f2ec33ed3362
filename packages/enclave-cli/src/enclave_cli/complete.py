"""``enclave __complete``: values only the cluster knows, for the shell completion scripts.

Kept apart from :mod:`enclave_cli.online` so that a TAB costs the kubernetes client's import and one list
call, not the import of every Enclave model: :func:`enclave_cli.__main__.main` answers this verb before
building the whole parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from enclave_core import API_GROUP, API_VERSION

COMPLETE_VERB = "__complete"
"""The hidden verb the completion scripts call for values only the cluster knows (``__complete tenants``)."""
TENANT_VERBS = ("cordon", "uncordon")
"""Verbs whose argument is a tenant name."""
COMPLETE_TIMEOUT = (1.0, 2.0)
"""(connect, read) seconds: a completion must never hang a shell; offline or slow, it offers nothing."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=("tenants",))
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")


def run(args: argparse.Namespace) -> int:
    """Print the names asked for, one per line; print nothing (exit 0) on any failure: a shell completing
    ``enclave cordon <TAB>`` without a cluster must stay silent, never show an error in the command line."""
    try:
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=args.kubeconfig, context=args.context)
        found = client.CustomObjectsApi(api).list_cluster_custom_object(
            API_GROUP, API_VERSION, "tenants", _request_timeout=COMPLETE_TIMEOUT
        )
        names = sorted(str(item["metadata"]["name"]) for item in found.get("items") or [])
    except Exception:  # any failure at all: no completion rather than a message in the shell
        return 0
    if names:
        print("\n".join(names))
    return 0


def fast(argv: Sequence[str]) -> int:
    """``enclave __complete ...`` without the rest of the CLI; a line it cannot parse completes nothing."""
    parser = argparse.ArgumentParser(prog=f"enclave {COMPLETE_VERB}", add_help=False)
    add_arguments(parser)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        return 0
    return run(args)
