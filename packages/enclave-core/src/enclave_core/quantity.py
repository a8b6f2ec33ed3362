"""Kubernetes ``resource.Quantity``: exact parsing, arithmetic and canonical formatting.

Quota controllers add and subtract resource lists (``map[string]Quantity`` in Go) and compare them
against limits. A float would turn ``0.1 + 0.2`` CPUs into ``300.00000000000006m`` and make a claim
that exactly fills a pool fail to fit, so every value here is an exact integer number of
nano-units (10^-9), the finest precision Kubernetes keeps. Python integers do not overflow, so sums
across a whole cluster stay exact too.

The grammar and the canonical form follow ``k8s.io/apimachinery/pkg/api/resource``::

    quantity  ::= sign? digits ('.' digits?)? suffix | sign? '.' digits suffix
    suffix    ::= binarySI | decimalSI | ('e' | 'E') sign? digits
    binarySI  ::= Ki | Mi | Gi | Ti | Pi | Ei           (powers of 1024)
    decimalSI ::= n | u | m | '' | k | M | G | T | P | E (powers of 1000)

Deliberate differences from Kubernetes, each chosen because this library also sums quotas:

* no cap at 2^63-1 for binary values (Kubernetes clamps those silently on parse);
* leading/trailing whitespace is rejected rather than trimmed, so a stored value is exactly
  what the user wrote;
* inputs longer than :data:`MAX_LENGTH` characters or with a decimal exponent beyond
  :data:`MAX_EXPONENT` are rejected, so a hostile ``1e999999999`` cannot make us build a
  billion-digit integer.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Annotated, Any, Final, TypeAlias

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, PlainValidator
from pydantic.json_schema import JsonSchemaValue, WithJsonSchema
from pydantic_core import core_schema

__all__ = [
    "MAX_EXPONENT",
    "MAX_LENGTH",
    "IntOrString",
    "Quantity",
    "QuantityFormat",
    "QuantityLike",
    "QuantityValue",
    "add_maps",
    "exceeded",
    "fits",
    "format_map",
    "max0",
    "parse_map",
    "sub_maps",
    "sum_quantities",
    "validate_quantity",
]

MAX_LENGTH: Final = 100
"""Longest accepted quantity string; real quantities are well under 30 characters."""

MAX_EXPONENT: Final = 100
"""Largest accepted magnitude of the ``e``/``E`` exponent form."""

_NANO: Final = 10**9
"""Nano-units per unit: the internal fixed-point scale."""


class QuantityFormat(enum.Enum):
    """The suffix family a quantity was written in; it decides how the value is printed back."""

    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


_BINARY_SUFFIXES: Final[dict[str, int]] = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
"""Binary suffix -> power of 1024."""

_DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
"""Decimal SI suffix -> power of ten."""

_DECIMAL_BY_EXPONENT: Final[dict[int, str]] = {exp: suffix for suffix, exp in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER: Final[dict[int, str]] = {power: suffix for suffix, power in _BINARY_SUFFIXES.items()}

# sign, integer digits, optional fraction, suffix; at least one digit is checked separately.
_QUANTITY_RE: Final = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([A-Za-z]*(?:[+-]?[0-9]+)?)")
_EXPONENT_RE: Final = re.compile(r"[eE]([+-]?[0-9]+)")


def _ceil_div(numerator: int, denominator: int) -> int:
    """Exact ceiling division for a positive denominator (no floats involved)."""
    return -((-numerator) // denominator)


def _round_away_from_zero(numerator: int, denominator: int) -> int:
    """Divide, rounding any remainder away from zero, like Kubernetes' ``inf.RoundUp``."""
    quotient, remainder = divmod(abs(numerator), denominator)
    if remainder:
        quotient += 1
    return quotient if numerator >= 0 else -quotient


@functools.total_ordering
class Quantity:
    """An exact Kubernetes quantity: an integer number of nano-units plus its suffix family.

    Equality, hashing and ordering look at the value only (``Quantity.parse("1Ki") ==
    Quantity.parse("1024")``), as Kubernetes' ``Cmp`` does; the format only affects ``str()``.
    Instances are immutable.
    """

    __slots__ = ("_format", "_nanos")

    _nanos: int
    _format: QuantityFormat

    def __init__(self, nanos: int = 0, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> None:
        """Build from a raw nano-unit count; most callers want :meth:`parse` or :meth:`from_units`."""
        if isinstance(nanos, bool) or not isinstance(nanos, int):
            raise TypeError(f"nanos must be an int, got {type(nanos).__name__}")
        object.__setattr__(self, "_nanos", nanos)
        object.__setattr__(self, "_format", fmt)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Quantity is immutable")

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def parse(cls, value: int | str | Quantity) -> Quantity:
        """Parse an ``int or string`` quantity as it appears in a Kubernetes object.

        Raises ``ValueError`` naming the offending value for anything Kubernetes would reject
        (and for floats and booleans, which a CRD's ``x-kubernetes-int-or-string`` rejects too).
        Precision finer than 1n is rounded away from zero, as Kubernetes does, so a tiny
        non-zero request never becomes zero.
        """
        if isinstance(value, Quantity):
            return value
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(
                f"invalid quantity {value!r}: expected an integer or a string such as '100m' or '1Gi', "
                f"got {type(value).__name__}"
            )
        if isinstance(value, int):
            return cls(value * _NANO, QuantityFormat.DECIMAL_SI)
        return cls._parse_str(value)

    @classmethod
    def _parse_str(cls, text: str) -> Quantity:
        def bad(why: str) -> ValueError:
            return ValueError(f"invalid quantity {text!r}: {why}")

        if not text:
            raise bad("empty string")
        if len(text) > MAX_LENGTH:
            raise bad(f"longer than {MAX_LENGTH} characters")
        match = _QUANTITY_RE.fullmatch(text)
        if match is None:
            raise bad("expected a number with an optional suffix, e.g. '100m', '1.5', '2e3', '1Gi'")
        sign, whole, fraction, suffix = match.groups()
        fraction = fraction or ""
        if not whole and not fraction:
            raise bad("no digits before the suffix")

        # The number as an exact fraction digits / 10^len(fraction).
        mantissa = int(whole + fraction) if (whole or fraction) else 0
        numerator, denominator = mantissa, 10 ** len(fraction)

        fmt: QuantityFormat
        if suffix in _BINARY_SUFFIXES:
            fmt = QuantityFormat.BINARY_SI
            numerator *= 1024 ** _BINARY_SUFFIXES[suffix]
        elif suffix in _DECIMAL_SUFFIXES:
            fmt = QuantityFormat.DECIMAL_SI
            exponent = _DECIMAL_SUFFIXES[suffix]
            numerator, denominator = _scale10(numerator, denominator, exponent)
        elif (exp_match := _EXPONENT_RE.fullmatch(suffix)) is not None:
            fmt = QuantityFormat.DECIMAL_EXPONENT
            exponent = int(exp_match.group(1))
            if abs(exponent) > MAX_EXPONENT:
                raise bad(f"exponent {exponent} is outside -{MAX_EXPONENT}..{MAX_EXPONENT}")
            numerator, denominator = _scale10(numerator, denominator, exponent)
        else:
            raise bad(
                f"unknown suffix {suffix!r}; use one of n, u, m, k, M, G, T, P, E, "
                "Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3"
            )

        nanos = _round_away_from_zero(numerator * _NANO, denominator)
        if sign == "-":
            nanos = -nanos
        # Kubernetes shows a binary quantity strictly between 0 and 1 as decimal: 0.5Ki is fine
        # (512) but 0.0001Ki is not a whole byte.  __str__ applies the general rule (|v| < 1024).
        return cls(nanos, fmt)

    @classmethod
    def from_units(cls, value: int | Decimal | Fraction, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        """Build from an exact number of base units (cores, bytes, ...), rounding to 1n away from 0."""
        if isinstance(value, bool):
            raise TypeError("a boolean is not a quantity")
        if isinstance(value, int):
            return cls(value * _NANO, fmt)
        exact = Fraction(value)
        return cls(_round_away_from_zero(exact.numerator * _NANO, exact.denominator), fmt)

    @classmethod
    def from_milli(cls, milli: int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        """Build from thousandths of a unit, the natural integer for CPU."""
        return cls(milli * 10**6, fmt)

    # -- accessors ----------------------------------------------------------------------------

    @property
    def nanos(self) -> int:
        """The exact value in nano-units (10^-9 of the base unit)."""
        return self._nanos

    @property
    def format(self) -> QuantityFormat:
        """The suffix family used when printing."""
        return self._format

    @property
    def is_zero(self) -> bool:
        """True when the value is exactly zero (whatever the suffix)."""
        return self._nanos == 0

    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self._nanos > 0) - (self._nanos < 0)

    def as_fraction(self) -> Fraction:
        """The exact value in base units."""
        return Fraction(self._nanos, _NANO)

    def as_decimal(self) -> Decimal:
        """The exact value in base units as a ``Decimal`` (always representable: scale is 10^-9)."""
        # The tuple constructor is exact; arithmetic such as scaleb() would round to the context's
        # 28 digits and silently lose precision on large values.
        digits = tuple(int(digit) for digit in str(abs(self._nanos)))
        return Decimal((int(self._nanos < 0), digits, -9))

    def milli_value(self) -> int:
        """ceil(value * 1000), like Kubernetes ``MilliValue()``: 1n of CPU still counts as 1m."""
        return _ceil_div(self._nanos, 10**6)

    def as_integer(self) -> int:
        """ceil(value), like Kubernetes ``Value()``: 0.5 bytes counts as one byte."""
        return _ceil_div(self._nanos, _NANO)

    def with_format(self, fmt: QuantityFormat) -> Quantity:
        """The same value printed in another suffix family."""
        return Quantity(self._nanos, fmt)

    # -- arithmetic and ordering ---------------------------------------------------------------

    def __add__(self, other: object) -> Quantity:
        """Sum; keeps the left format unless the left side is zero (then the right one), like Go."""
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self._nanos + other._nanos, self._result_format(other))

    def __sub__(self, other: object) -> Quantity:
        """Difference; same format rule as ``+``."""
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self._nanos - other._nanos, self._result_format(other))

    def __neg__(self) -> Quantity:
        return Quantity(-self._nanos, self._format)

    def __pos__(self) -> Quantity:
        return self

    def __abs__(self) -> Quantity:
        return Quantity(abs(self._nanos), self._format)

    def _result_format(self, other: Quantity) -> QuantityFormat:
        return other._format if self._nanos == 0 else self._format

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos == other._nanos

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self._nanos < other._nanos

    def __hash__(self) -> int:
        return hash(self._nanos)

    def __bool__(self) -> bool:
        return self._nanos != 0

    # -- formatting ---------------------------------------------------------------------------

    def __str__(self) -> str:
        """The canonical Kubernetes form: no fractional digits, the largest suffix that is exact.

        A binary quantity is printed with a binary suffix only when it is a whole number of at
        least 1024 in magnitude (``1024Mi`` -> ``1Gi``, ``1.5Gi`` -> ``1536Mi``); otherwise it falls
        back to decimal SI (``0.5Ki`` -> ``512``), exactly as Kubernetes does, so no precision is lost.
        """
        if self._nanos == 0:
            return "0"
        sign = "-" if self._nanos < 0 else ""
        magnitude = abs(self._nanos)
        fmt = self._format
        if fmt is QuantityFormat.BINARY_SI and (magnitude < 1024 * _NANO or magnitude % _NANO):
            fmt = QuantityFormat.DECIMAL_SI

        if fmt is QuantityFormat.BINARY_SI:
            units = magnitude // _NANO
            power = 0
            while power < max(_BINARY_BY_POWER) and units % 1024 == 0:
                units //= 1024
                power += 1
            return f"{sign}{units}{_BINARY_BY_POWER.get(power, '')}"

        # Decimal: move factors of 1000 from the mantissa into the exponent (from 10^-9 upward).
        mantissa, exponent = magnitude, -9
        limit = 18 if fmt is QuantityFormat.DECIMAL_SI else None
        while mantissa % 1000 == 0 and (limit is None or exponent < limit):
            mantissa //= 1000
            exponent += 3
        if fmt is QuantityFormat.DECIMAL_SI:
            return f"{sign}{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"
        return f"{sign}{mantissa}" + (f"e{exponent}" if exponent else "")

    def __reduce__(self) -> tuple[type[Quantity], tuple[int, QuantityFormat]]:
        """Pickle/copy support, needed because ``__setattr__`` is blocked."""
        return (Quantity, (self._nanos, self._format))

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def to_json(self) -> str:
        """The canonical string, as Kubernetes serialises a Quantity in JSON."""
        return str(self)

    # -- pydantic integration: a Quantity field accepts int | str and serialises canonically ----

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.parse,
            serialization=core_schema.plain_serializer_function_ser_schema(str, when_used="always"),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return dict(_INT_OR_STRING_SCHEMA)


QuantityLike: TypeAlias = Quantity | int | str
"""Anything the helpers accept as a quantity: a parsed one, or the raw ``int or string`` API value."""


def _scale10(numerator: int, denominator: int, exponent: int) -> tuple[int, int]:
    """Multiply the fraction numerator/denominator by 10^exponent, exactly."""
    if exponent >= 0:
        return numerator * 10**exponent, denominator
    return numerator, denominator * 10**-exponent


# -- pydantic field types for ``int or string`` ----------------------------------------------

_INT_OR_STRING_SCHEMA: Final[dict[str, Any]] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}
"""The only ``anyOf`` a structural CRD schema allows for ``int or string`` fields."""


def validate_quantity(value: object) -> int | str:
    """Check ``value`` parses as a quantity and return it unchanged (the user's own spelling)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        hint = "; write fractions as strings, e.g. '1.5' or '1500m'" if isinstance(value, float) else ""
        raise ValueError(
            f"invalid quantity {value!r}: expected an integer or a string such as '100m' or '1Gi', "
            f"got {type(value).__name__}{hint}"
        )
    Quantity.parse(value)
    return value


def _validate_int_or_string(value: object) -> int | str:
    """Accept exactly what ``x-kubernetes-int-or-string`` accepts: an integer or a string."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"expected an integer or a string, got {type(value).__name__} {value!r}")
    return value


QuantityValue = Annotated[
    int | str,
    PlainValidator(validate_quantity),
    WithJsonSchema(_INT_OR_STRING_SCHEMA),
]
"""An ``int or string`` API field holding a quantity.

The value is validated but stored and serialised exactly as the user wrote it (``"1024Mi"`` stays
``"1024Mi"``), so reading an object back through the model and writing it again is a no-op.
Use :meth:`Quantity.parse` on it when doing arithmetic. Floats and booleans are rejected, as
``x-kubernetes-int-or-string`` rejects them.
"""

IntOrString = Annotated[
    int | str,
    PlainValidator(_validate_int_or_string),
    WithJsonSchema(_INT_OR_STRING_SCHEMA),
]
"""A plain Kubernetes ``IntOrString`` (ports by name or number, ``25%``...), with no quantity check."""


# -- resource lists (map[string]Quantity) ------------------------------------------------------


def parse_map(values: Mapping[str, QuantityLike]) -> dict[str, Quantity]:
    """Parse every value of a resource list; the error names the key and the bad value."""
    result: dict[str, Quantity] = {}
    for key, value in values.items():
        try:
            result[key] = Quantity.parse(value)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}") from None
    return result


def format_map(values: Mapping[str, QuantityLike]) -> dict[str, str]:
    """Canonical strings for a resource list, e.g. for a status field."""
    return {key: str(quantity) for key, quantity in parse_map(values).items()}


def add_maps(*maps: Mapping[str, QuantityLike]) -> dict[str, Quantity]:
    """Sum resource lists key by key; a key missing from one list counts as zero there."""
    result: dict[str, Quantity] = {}
    for mapping in maps:
        for key, quantity in parse_map(mapping).items():
            result[key] = result[key] + quantity if key in result else quantity
    return result


def sub_maps(minuend: Mapping[str, QuantityLike], subtrahend: Mapping[str, QuantityLike]) -> dict[str, Quantity]:
    """``minuend - subtrahend`` key by key, over the union of keys (missing counts as zero).

    Like Kubernetes' ``quota.Subtract``, a key only in ``subtrahend`` comes out negative; pass the
    result through :func:`max0` when a negative remainder has no meaning.
    """
    left, right = parse_map(minuend), parse_map(subtrahend)
    result = {key: value - right[key] if key in right else value for key, value in left.items()}
    for key, value in right.items():
        if key not in result:
            result[key] = -value
    return result


def max0(values: Mapping[str, QuantityLike]) -> dict[str, Quantity]:
    """Clamp every quantity at zero (``max(q, 0)``), e.g. remaining capacity after over-use."""
    return {key: (q if q.sign() >= 0 else Quantity(0, q.format)) for key, q in parse_map(values).items()}


def exceeded(
    requested: Mapping[str, QuantityLike],
    available: Mapping[str, QuantityLike],
    *,
    missing_is_unlimited: bool = False,
) -> list[str]:
    """Sorted resource names whose request is larger than what is available.

    A resource absent from ``available`` counts as zero available, unless
    ``missing_is_unlimited`` (the ResourceQuota reading: only listed resources are constrained).
    """
    wanted, have = parse_map(requested), parse_map(available)
    over: list[str] = []
    for key, quantity in wanted.items():
        if key in have:
            if quantity > have[key]:
                over.append(key)
        elif not missing_is_unlimited and quantity.sign() > 0:
            over.append(key)
    return sorted(over)


def fits(
    requested: Mapping[str, QuantityLike],
    available: Mapping[str, QuantityLike],
    *,
    missing_is_unlimited: bool = False,
) -> bool:
    """True when every requested quantity is at most the available one (see :func:`exceeded`)."""
    return not exceeded(requested, available, missing_is_unlimited=missing_is_unlimited)


def sum_quantities(values: Iterable[QuantityLike]) -> Quantity:
    """Exact sum of quantities (zero for an empty iterable)."""
    total = Quantity(0)
    for value in values:
        total = total + Quantity.parse(value)
    return total
