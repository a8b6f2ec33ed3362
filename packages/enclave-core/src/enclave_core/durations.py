"""Go-style durations (``24h``, ``1h30m``, ``500ms``), the format of every duration field in the API."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

_UNITS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}
_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> timedelta:
    """Parse like Go's ``time.ParseDuration`` (no sign); raise ValueError naming the bad text."""
    if text == "0":
        return timedelta(0)
    position, total = 0, Decimal(0)
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        total += Decimal(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if position != len(text) or not text:
        raise ValueError(f"invalid duration {text!r}: use a Go duration such as 30s, 15m, 24h or 1h30m")
    return timedelta(seconds=float(total))


def format_duration(value: timedelta) -> str:
    """The shortest Go-style spelling of whole seconds (``90s`` -> ``1m30s``)."""
    seconds = int(value.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"
