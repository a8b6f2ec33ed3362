"""Where the repository and the per-run working directories are."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """The monorepo root: ``$ENCLAVE_REPO_ROOT``, else the first parent (of cwd, then of this file) holding hack/."""
    explicit = os.environ.get("ENCLAVE_REPO_ROOT")
    if explicit:
        return Path(explicit)
    for start in (Path.cwd(), Path(__file__).resolve()):
        for candidate in (start, *start.parents):
            if (candidate / "hack" / "controlplane").is_dir() and (candidate / "packages").is_dir():
                return candidate
    raise RuntimeError("cannot find the Enclave repository root; set ENCLAVE_REPO_ROOT")
