"""Custom-quota semantics both sides must agree on: which objects a source selects and what each counts.

The quota controller (counting what exists) and admission (counting what is being written) evaluate the same
compiled source with the same code, so an object the controller counts is exactly an object admission
reserved for; a disagreement would leave reservations that never fold.
"""

from __future__ import annotations

from enclave_core.quotas.evaluate import (
    CompiledSource,
    UsageError,
    compile_source,
    custom_quota_problems,
    scope_matches,
    source_problems,
)
from enclave_core.quotas.jsonpath import JsonPathError, compile_path

__all__ = [
    "CompiledSource",
    "JsonPathError",
    "UsageError",
    "compile_path",
    "compile_source",
    "custom_quota_problems",
    "scope_matches",
    "source_problems",
]
