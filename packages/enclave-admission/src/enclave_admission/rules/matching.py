"""The primitives rules compare values with, compiled once per snapshot: value matchers and address ranges.

Address ranges are unions of integer intervals per IP version. Deny needs "does this grant overlap any
rule range", allow needs "is this grant wholly inside the union", and a grant is itself a union (a CIDR
minus its ``except`` blocks, or all of IPv4 and IPv6 for a peer-less NetworkPolicy rule), so intervals
answer all of it with a sort and a walk, whatever the prefix lengths.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from enclave_core.api.meta import ValueMatcher
from enclave_core.patterns import Pattern, PatternError, compile_pattern

Interval = tuple[int, int]
"""Inclusive first and last address, as integers."""


class Matcher(NamedTuple):
    """One ValueMatcher: exact values, and a regular expression the whole value must (or must not) match
    (linear-time: :mod:`enclave_core.patterns`)."""

    exact: frozenset[str]
    regex: Pattern | None
    negate: bool
    text: str
    """For messages: how the matcher reads in the rule."""

    def matches(self, value: str) -> bool:
        if value in self.exact:
            return True
        if self.regex is None:
            return False
        return self.regex.fullmatch(value) != self.negate


def _text(matcher: ValueMatcher) -> str:
    parts = []
    if matcher.exact:
        parts.append(f"exact {sorted(matcher.exact)}")
    if matcher.exp:
        parts.append(f"{'not ' if matcher.negate else ''}matching {matcher.exp!r}")
    return " or ".join(parts) or "nothing"


def matchers(values: Sequence[ValueMatcher] | None) -> tuple[Matcher, ...]:
    """Compile ValueMatchers; raise ``ValueError`` for a regular expression that does not compile (refused at
    the API, so only a rule admitted while the webhook was down gets here: the rule is then broken, see
    :mod:`enclave_admission.rules.compiled`)."""
    found = []
    for matcher in values or ():
        regex: Pattern | None = None
        if matcher.exp:
            try:
                regex = compile_pattern(matcher.exp)
            except PatternError as err:
                raise ValueError(f"regular expression {matcher.exp!r} does not compile: {err.reason}") from err
        found.append(Matcher(frozenset(matcher.exact or ()), regex, matcher.negate, _text(matcher)))
    return tuple(found)


def match_any(compiled: Sequence[Matcher], value: str) -> bool:
    return any(matcher.matches(value) for matcher in compiled)


def describe(compiled: Sequence[Matcher]) -> str:
    return "; ".join(matcher.text for matcher in compiled)


# -- address ranges ------------------------------------------------------------------------------------------


class Grant(NamedTuple):
    """Address space per IP version (4, 6): sorted, disjoint intervals."""

    v4: tuple[Interval, ...]
    v6: tuple[Interval, ...]

    @property
    def empty(self) -> bool:
        return not self.v4 and not self.v6


def _interval(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> Interval:
    return int(network.network_address), int(network.broadcast_address)


def _merge(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1] + 1:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return tuple(merged)


def parse_network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """A CIDR or a single address (a host CIDR); None when it is neither."""
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        return None


def ranges(cidrs: Iterable[str]) -> Grant:
    """The union of ``cidrs`` (entries that do not parse are refused at the API and skipped here)."""
    v4: list[Interval] = []
    v6: list[Interval] = []
    for text in cidrs:
        network = parse_network(text)
        if network is not None:
            (v4 if network.version == 4 else v6).append(_interval(network))
    return Grant(_merge(v4), _merge(v6))


EVERYTHING = Grant(((0, 2**32 - 1),), ((0, 2**128 - 1),))
"""What a peer-less NetworkPolicy rule grants: all of IPv4 and IPv6."""


def _subtract(intervals: Sequence[Interval], holes: Sequence[Interval]) -> tuple[Interval, ...]:
    out: list[Interval] = []
    for start, end in intervals:
        current = start
        for hole_start, hole_end in holes:
            if hole_end < current or hole_start > end:
                continue
            if hole_start > current:
                out.append((current, hole_start - 1))
            current = max(current, hole_end + 1)
            if current > end:
                break
        if current <= end:
            out.append((current, end))
    return tuple(out)


def grant(cidr: str, excepts: Iterable[str] = ()) -> Grant | None:
    """``cidr`` minus ``excepts`` (an ipBlock); None when ``cidr`` does not parse."""
    network = parse_network(cidr)
    if network is None:
        return None
    holes = ranges(excepts)
    if network.version == 4:
        return Grant(_subtract((_interval(network),), holes.v4), ())
    return Grant((), _subtract((_interval(network),), holes.v6))


def _overlap(left: Sequence[Interval], right: Sequence[Interval]) -> bool:
    i = j = 0
    while i < len(left) and j < len(right):
        if left[i][1] < right[j][0]:
            i += 1
        elif right[j][1] < left[i][0]:
            j += 1
        else:
            return True
    return False


def overlaps(space: Grant, rule: Grant) -> bool:
    return _overlap(space.v4, rule.v4) or _overlap(space.v6, rule.v6)


def covered(space: Grant, rule: Grant) -> bool:
    """Every address of ``space`` is inside ``rule``."""
    return not _subtract(space.v4, rule.v4) and not _subtract(space.v6, rule.v6)
