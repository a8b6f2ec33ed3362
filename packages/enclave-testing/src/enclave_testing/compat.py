"""``tox -e compat``: the integration suite once per supported Kubernetes minor, then a table of the results.

Each minor runs in its own pytest process with ``ENCLAVE_KUBERNETES_VERSION`` set (so one control plane per
minor, built on first use like any other), oldest first. Arguments after ``--`` go to every pytest run, e.g.
``tox -e compat -- -x -k chart``; ``--minors 1.36,1.37`` picks some. The exit status is non-zero when any
minor failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

from enclave_testing.binaries import CONTROL_PLANE, ensure, supported_kubernetes_minors
from enclave_testing.paths import repo_root

_SUMMARY = re.compile(r"^=* ?(\d+ (?:passed|failed|error|skipped|deselected).*?) in [\d.]+s", re.MULTILINE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m enclave_testing.compat", description=__doc__.split("\n")[0])
    parser.add_argument("--minors", default="", help="comma-separated minors (default: every supported one)")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    minors = [m.strip().lstrip("v") for m in args.minors.split(",") if m.strip()] or supported_kubernetes_minors()
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
                "tests/integration",
                "tests/security",
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
        print(f"{minor} | {'pass' if code == 0 else 'FAIL'} | {summary} | {elapsed:.0f}s")
    return 0 if all(code == 0 for _, code, _, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
