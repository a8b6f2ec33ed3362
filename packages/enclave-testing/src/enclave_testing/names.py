"""Names for objects a test creates: unique per call, so tests sharing one control plane never collide."""

from __future__ import annotations

import secrets


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"
