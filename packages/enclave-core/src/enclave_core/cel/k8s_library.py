"""The Kubernetes CEL extension functions, written once over plain Python values.

Kubernetes adds quantities, list helpers, regex ``find``, ``url()``, ``ip()`` and ``cidr()`` to
CEL (``k8s.io/apiserver/pkg/cel/library``). Users copy expressions from ValidatingAdmissionPolicy
and CRD rules, so the behaviour here follows the Kubernetes documentation: same names, same
errors for the same bad inputs. Each engine adapter wraps these functions in its own calling
convention; keeping the semantics in one engine-independent place is what lets both engines pass
the same conformance suite.

Errors are raised as :class:`LibraryError` carrying an :class:`~enclave_core.cel.errors.ErrorKind`;
the adapters turn them into CEL errors, so they surface as ordinary evaluation errors.
"""

from __future__ import annotations

import datetime
import ipaddress
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias
from urllib.parse import parse_qs, urlsplit

from enclave_core.cel.errors import ErrorKind
from enclave_core.cel.limits import MAX_REGEX_LENGTH, MAX_STRING_INPUT
from enclave_core.patterns import Pattern, PatternError, compile_pattern
from enclave_core.quantity import Quantity

__all__ = [
    "CIDR",
    "CIDR_TYPES",
    "IP",
    "IP_TYPES",
    "URL",
    "LibraryError",
    "cel_equal",
]

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_NANO: Final = 10**9

IP: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
CIDR: TypeAlias = ipaddress.IPv4Interface | ipaddress.IPv6Interface
"""A prefix that keeps its host bits, as Kubernetes' ``cidr('10.0.0.1/8').ip()`` needs them."""

CIDR_TYPES: Final = (ipaddress.IPv4Interface, ipaddress.IPv6Interface)
IP_TYPES: Final = (ipaddress.IPv4Address, ipaddress.IPv6Address)
"""For ``isinstance``; test :data:`CIDR_TYPES` first, an interface is a subclass of an address."""


class LibraryError(Exception):
    """A Kubernetes library function rejected its input; becomes a CEL evaluation error."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _invalid(message: str) -> LibraryError:
    return LibraryError(ErrorKind.INVALID_ARGUMENT, message)


def _overload(message: str) -> LibraryError:
    return LibraryError(ErrorKind.NO_MATCHING_OVERLOAD, message)


# -- equality with CEL semantics --------------------------------------------------------------


def cel_equal(left: Any, right: Any) -> bool:
    """CEL equality over plain values: numbers compare across int/double, bools are not numbers."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(cel_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(cel_equal(v, right[k]) for k, v in left.items())
    return type(left) is type(right) and bool(left == right)


# -- quantities ------------------------------------------------------------------------------


def quantity(text: str) -> Quantity:
    """``quantity(string)``: parse, or fail like Kubernetes' ``resource.ParseQuantity``."""
    try:
        return Quantity.parse(text)
    except ValueError as exc:
        raise _invalid(
            f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {exc}"
        ) from None


def is_quantity(text: str) -> bool:
    """``isQuantity(string)``."""
    try:
        Quantity.parse(text)
    except ValueError:
        return False
    return True


def q_sign(q: Quantity) -> int:
    return q.sign()


def q_is_integer(q: Quantity) -> bool:
    """True when ``asInteger()`` would succeed: a whole number within int64."""
    return q.nanos % _NANO == 0 and _INT64_MIN <= q.nanos // _NANO <= _INT64_MAX


def q_as_integer(q: Quantity) -> int:
    if not q_is_integer(q):
        raise LibraryError(ErrorKind.OVERFLOW, "cannot convert value to integer")
    return q.nanos // _NANO


def q_as_approximate_float(q: Quantity) -> float:
    return q.nanos / _NANO


def _as_quantity(value: Quantity | int) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Quantity.from_units(value)
    raise _overload(f"no such overload: quantity with {type(value).__name__}")


def q_add(q: Quantity, other: Quantity | int) -> Quantity:
    return q + _as_quantity(other)


def q_sub(q: Quantity, other: Quantity | int) -> Quantity:
    return q - _as_quantity(other)


def q_compare_to(q: Quantity, other: Quantity) -> int:
    return (q > other) - (q < other)


def q_is_greater_than(q: Quantity, other: Quantity) -> bool:
    return q > other


def q_is_less_than(q: Quantity, other: Quantity) -> bool:
    return q < other


# -- lists -----------------------------------------------------------------------------------


def _kind_of(value: Any) -> type:
    """The CEL-level type family of a plain value; bool is kept apart from int."""
    return bool if isinstance(value, bool) else type(value)


def _homogeneous(items: Sequence[Any], allowed: tuple[type, ...], what: str) -> None:
    kinds = {_kind_of(item) for item in items}
    if len(kinds) > 1 or (kinds and not all(issubclass(k, allowed) for k in kinds)):
        raise _overload(f"no such overload: {what} on a list of {', '.join(sorted(k.__name__ for k in kinds))}")


_SUMMABLE: Final = (int, float, datetime.timedelta)
_COMPARABLE: Final = (int, float, bool, str, bytes, datetime.timedelta, datetime.datetime)


def list_sum(items: Sequence[Any]) -> Any:
    """``sum()``: zero for an empty list, as Kubernetes returns the zero of the element type."""
    _homogeneous(items, _SUMMABLE, "sum")
    if not items:
        return 0
    total = items[0]
    for item in items[1:]:
        total = total + item
    if isinstance(total, int) and not _INT64_MIN <= total <= _INT64_MAX:
        raise LibraryError(ErrorKind.OVERFLOW, "integer overflow")
    return total


def list_min(items: Sequence[Any]) -> Any:
    _homogeneous(items, _COMPARABLE, "min")
    if not items:
        raise _invalid("min called on empty list")
    return min(items)


def list_max(items: Sequence[Any]) -> Any:
    _homogeneous(items, _COMPARABLE, "max")
    if not items:
        raise _invalid("max called on empty list")
    return max(items)


def list_is_sorted(items: Sequence[Any]) -> bool:
    _homogeneous(items, _COMPARABLE, "isSorted")
    return all(a <= b for a, b in itertools.pairwise(items))


def list_index_of(items: Sequence[Any], value: Any) -> int:
    for index, item in enumerate(items):
        if cel_equal(item, value):
            return index
    return -1


def list_last_index_of(items: Sequence[Any], value: Any) -> int:
    for index in range(len(items) - 1, -1, -1):
        if cel_equal(items[index], value):
            return index
    return -1


# -- regex -----------------------------------------------------------------------------------


def _regex(pattern: str) -> Pattern:
    """The pattern on the linear-time engine (:mod:`enclave_core.patterns`, RE2 like ``matches()``): a tenant's
    expression and input cannot make ``find`` backtrack."""
    if len(pattern) > MAX_REGEX_LENGTH:
        raise LibraryError(ErrorKind.LIMIT, f"regular expression longer than {MAX_REGEX_LENGTH} characters")
    try:
        return compile_pattern(pattern)
    except PatternError as exc:
        raise _invalid(str(exc)) from None


def _check_input(text: str) -> None:
    if len(text) > MAX_STRING_INPUT:
        raise LibraryError(ErrorKind.LIMIT, f"input longer than {MAX_STRING_INPUT} characters")


def regex_find(text: str, pattern: str) -> str:
    """``'abc'.find(re)``: the first match, or the empty string."""
    _check_input(text)
    return _regex(pattern).find(text) or ""


def regex_find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    """``'abc'.findAll(re[, n])``: every match, or at most ``n`` when ``n`` is not negative."""
    _check_input(text)
    if limit == 0:
        return []
    found = _regex(pattern).find_all(text)
    return found if limit < 0 else found[:limit]


# -- url -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class URL:
    """A parsed URL; ``text`` is what the user wrote (equality follows it)."""

    text: str


def url(text: str) -> URL:
    """``url(string)``: an absolute URI or an absolute path, as Kubernetes requires."""
    _check_input(text)
    if not _url_ok(text):
        raise _invalid(f"URL {text!r} must be an absolute URI or an absolute path")
    return URL(text)


def _url_ok(text: str) -> bool:
    if not text or any(c.isspace() for c in text):
        return False
    try:
        parts = urlsplit(text)
        _ = parts.port
    except ValueError:
        return False
    if parts.scheme:
        return bool(re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme))
    return text.startswith("/")


def is_url(text: str) -> bool:
    return _url_ok(text)


def url_scheme(u: URL) -> str:
    return urlsplit(u.text).scheme


def url_host(u: URL) -> str:
    return urlsplit(u.text).netloc.rpartition("@")[2]


def url_hostname(u: URL) -> str:
    return urlsplit(u.text).hostname or ""


def url_port(u: URL) -> str:
    host = url_host(u)
    if host.startswith("["):
        _, _, rest = host.partition("]")
        return rest[1:] if rest.startswith(":") else ""
    return host.rpartition(":")[2] if ":" in host else ""


def url_escaped_path(u: URL) -> str:
    return urlsplit(u.text).path


def url_query(u: URL) -> dict[str, list[str]]:
    return parse_qs(urlsplit(u.text).query, keep_blank_values=True)


# -- ip and cidr -----------------------------------------------------------------------------


def ip(text: str) -> IP:
    """``ip(string)``: IPv4 or IPv6; zones and IPv4-mapped IPv6 addresses are refused as in Kubernetes."""
    if "%" in text:
        raise _invalid(f"IP address with zone value is not allowed: {text!r}")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise _invalid(f"IP Address {text!r} parse error during conversion from string") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise _invalid(f"IPv4-mapped IPv6 address is not allowed: {text!r}")
    return address


def is_ip(text: str) -> bool:
    try:
        ip(text)
    except LibraryError:
        return False
    return True


def ip_is_canonical(text: str) -> bool:
    return str(ip(text)) == text


def ip_family(address: IP) -> int:
    return address.version


def ip_is_unspecified(address: IP) -> bool:
    return address.is_unspecified


def ip_is_loopback(address: IP) -> bool:
    return address.is_loopback


_V4_LINK_LOCAL_MULTICAST: Final = ipaddress.ip_network("224.0.0.0/24")
_V6_LINK_LOCAL_MULTICAST: Final = ipaddress.ip_network("ff02::/16")


def ip_is_link_local_multicast(address: IP) -> bool:
    if isinstance(address, ipaddress.IPv4Address):
        return address in _V4_LINK_LOCAL_MULTICAST
    return address in _V6_LINK_LOCAL_MULTICAST


def ip_is_link_local_unicast(address: IP) -> bool:
    return address.is_link_local and not address.is_multicast


def ip_is_global_unicast(address: IP) -> bool:
    """Go's definition: private ranges count as global unicast, broadcast does not."""
    if isinstance(address, ipaddress.IPv4Address) and address == ipaddress.IPv4Address("255.255.255.255"):
        return False
    return not (
        address.is_unspecified or address.is_loopback or address.is_multicast or ip_is_link_local_unicast(address)
    )


def cidr(text: str) -> CIDR:
    """``cidr(string)``: an address with a prefix length; host bits are kept (see ``masked()``)."""
    address, slash, length = text.partition("/")
    if not slash or not length.isdigit() or (len(length) > 1 and length.startswith("0")):
        raise _invalid(f"network address parse error during conversion from string: {text!r}")
    parsed = ip(address)
    try:
        return ipaddress.ip_interface(f"{parsed}/{int(length)}")
    except ValueError:
        raise _invalid(f"network address parse error during conversion from string: {text!r}") from None


def is_cidr(text: str) -> bool:
    try:
        cidr(text)
    except LibraryError:
        return False
    return True


def cidr_contains_ip(prefix: CIDR, address: IP | str) -> bool:
    target = ip(address) if isinstance(address, str) else address
    return target.version == prefix.version and target in prefix.network


def cidr_contains_cidr(prefix: CIDR, other: CIDR | str) -> bool:
    target = cidr(other) if isinstance(other, str) else other
    if target.version != prefix.version:
        return False
    return target.network.prefixlen >= prefix.network.prefixlen and target.ip in prefix.network


def cidr_ip(prefix: CIDR) -> IP:
    return prefix.ip


def cidr_masked(prefix: CIDR) -> CIDR:
    return ipaddress.ip_interface(str(prefix.network))


def cidr_prefix_length(prefix: CIDR) -> int:
    return prefix.network.prefixlen


def cidr_string(prefix: CIDR) -> str:
    return f"{prefix.ip}/{prefix.network.prefixlen}"
