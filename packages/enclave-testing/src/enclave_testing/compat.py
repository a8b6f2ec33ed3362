"""``tox -e compat``: the integration suite once per supported Kubernetes minor, then a table of the results.

Each minor runs in its own pytest process with ``ENCLAVE_KUBERNETES_VERSION`` set (so one control plane per
minor, built on first use like any other), oldest first. Arguments after ``--`` go to every pytest run, e.g.
``tox -e compat -- -x -k chart``; ``--minors 1.36,1.37`` (before or after the ``--``) picks some. Paths among
them (``tox -e compat -- tests/integration/rules``, or a test's node id) replace the default selection,
``tests/integration`` and ``tests/security``: added to it, pytest would run the whole suite and the named part
once more. The exit status is non-zero when any minor failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

from enclave_testing.binaries import BINARIES, CONTROL_PLANE, ensure, pinned_version, supported_kubernetes_minors
from enclave_testing.paths import repo_root

DEFAULT_SELECTION = ("tests/integration", "tests/security")

_SUMMARY = re.compile(r"^=* ?(\d+ (?:passed|failed|error|skipped|deselected).*?) in [\d.]+s", re.MULTILINE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m enclave_testing.compat", description=__doc__.split("\n")[0])
    parser.add_argument("--minors", default="", help="comma-separated minors (default: every supported one)")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    args.minors, args.pytest_args = _minors_among(args.minors, args.pytest_args)
    minors = [m.strip().lstrip("v") for m in args.minors.split(",") if m.strip()] or supported_kubernetes_minors()
    selection = [] if any(_is_path(arg) for arg in args.pytest_args) else list(DEFAULT_SELECTION)
    results: list[tuple[str, int, str, float]] = []
    for minor in minors:
        print(f"[compat] Kubernetes {minor}: building or reusing the control plane", file=sys.stderr, flush=True)
        ensure(*CONTROL_PLANE, minor=minor)
        started = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                *selection,
                "-p",
                "no:cacheprovider",
                *args.pytest_args,
            ],
            cwd=repo_root(),
            env={**os.environ, "ENCLAVE_KUBERNETES_VERSION": minor},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        sys.stdout.write(proc.stdout)
        found = _SUMMARY.findall(proc.stdout)
        results.append((minor, proc.returncode, found[-1] if found else "no summary", time.monotonic() - started))
    print("\nKubernetes | result | pytest summary | wall time")
    print("--- | --- | --- | ---")
    for minor, code, summary, elapsed in results:
        pinned = f"{pinned_version(BINARIES['kube-apiserver'], minor)}, etcd {pinned_version(BINARIES['etcd'], minor)}"
        print(f"{minor} ({pinned}) | {'pass' if code == 0 else 'FAIL'} | {summary} | {elapsed:.0f}s")
    return 0 if all(code == 0 for _, code, _, _ in results) else 1


def _minors_among(minors: str, pytest_args: list[str]) -> tuple[str, list[str]]:
    """``--minors`` found after ``--`` too: tox hands its own arguments after one (``tox -e compat -- --minors
    1.37 tests/integration/rules``), where argparse reads everything as pytest's."""
    rest: list[str] = []
    found = iter(pytest_args)
    for arg in found:
        if arg == "--minors":
            minors = next(found, minors)
        elif arg.startswith("--minors="):
            minors = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return minors, rest


def _is_path(arg: str) -> bool:
    """Whether a pytest argument names tests (a file, a folder, a node id) rather than an option or its value."""
    if arg.startswith("-"):
        return False
    return (repo_root() / arg.split("::", 1)[0]).exists()


if __name__ == "__main__":
    raise SystemExit(main())
