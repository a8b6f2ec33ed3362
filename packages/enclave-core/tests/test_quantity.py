"""Quantity parsing, canonical form and arithmetic, checked against Kubernetes' documented behaviour."""

from __future__ import annotations

import copy
import pickle
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from enclave_core.quantity import (
    IntOrString,
    Quantity,
    QuantityFormat,
    QuantityValue,
    add_maps,
    exceeded,
    fits,
    format_map,
    max0,
    parse_map,
    sub_maps,
    sum_quantities,
)

# -- table tests: input -> canonical string, as kube-apiserver would store it -------------------

CANONICAL = [
    ("100m", "100m"),
    ("1Gi", "1Gi"),
    ("1.5", "1500m"),
    ("2e3", "2e3"),
    ("1E3", "1e3"),
    ("1e+3", "1e3"),
    ("12e2", "1200"),
    ("1e-3", "1e-3"),
    ("+1", "1"),
    ("-1", "-1"),
    ("0.1Ki", "102400m"),
    ("0.5Ki", "512"),
    ("1024Mi", "1Gi"),
    ("1536Mi", "1536Mi"),
    ("1.5Gi", "1536Mi"),
    ("-1.5Gi", "-1536Mi"),
    ("1500m", "1500m"),
    ("1000m", "1"),
    ("1000", "1k"),
    ("1500", "1500"),
    ("1000000", "1M"),
    ("1E", "1E"),
    ("1000E", "1000E"),
    ("1024Ei", "1024Ei"),
    ("0", "0"),
    ("0Gi", "0"),
    ("-0", "0"),
    ("0.0", "0"),
    (".5", "500m"),
    ("5.", "5"),
    ("1n", "1n"),
    ("1u", "1u"),
    ("1000n", "1u"),
    ("0.0000000001", "1n"),  # finer than nano rounds away from zero
    ("-0.0000000001", "-1n"),
    ("1025Ki", "1025Ki"),
    ("1.0009765625Ki", "1025"),  # whole bytes but not a whole Ki
    ("0.001Ki", "1024m"),
    ("100Mi", "100Mi"),
    ("1k", "1k"),
    ("1M", "1M"),
    ("1G", "1G"),
    ("1T", "1T"),
    ("1P", "1P"),
    ("1Ki", "1Ki"),
    ("1Mi", "1Mi"),
    ("1Ti", "1Ti"),
    ("1Pi", "1Pi"),
    ("1Ei", "1Ei"),
    (1, "1"),
    (2048, "2048"),
    (1000, "1k"),
    (-5, "-5"),
]


@pytest.mark.parametrize(("given_value", "expected"), CANONICAL)
def test_canonical_form(given_value: int | str, expected: str) -> None:
    assert str(Quantity.parse(given_value)) == expected


VALUES = [
    ("100m", Fraction(1, 10)),
    ("1Gi", Fraction(2**30)),
    ("1.5", Fraction(3, 2)),
    ("2e3", Fraction(2000)),
    ("1E3", Fraction(1000)),
    ("0.1Ki", Fraction(1024, 10)),
    ("1Ei", Fraction(2**60)),
    ("1E", Fraction(10**18)),
    ("3n", Fraction(3, 10**9)),
    ("250u", Fraction(250, 10**6)),
]


@pytest.mark.parametrize(("text", "value"), VALUES)
def test_exact_value(text: str, value: Fraction) -> None:
    assert Quantity.parse(text).as_fraction() == value


BAD = ["", " 1", "1 ", "1 Gi", "1K", "1KI", "1gi", "1e", "1e3.5", ".", "abc", "Gi", "1.5.5", "--1", "+-1",
       "1e1000", "1x", "0x10", "1_000", "\u0661", "1" * 101]  # fmt: skip


@pytest.mark.parametrize("text", BAD)
def test_rejects_bad_strings_naming_the_value(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity") as info:
        Quantity.parse(text)
    assert repr(text)[:20] in str(info.value)


@pytest.mark.parametrize("value", [1.5, 1.0, True, None, [1]])
def test_rejects_non_int_or_string(value: object) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        Quantity.parse(value)  # type: ignore[arg-type]


def test_values_and_rounding() -> None:
    assert Quantity.parse("1500m").milli_value() == 1500
    assert Quantity.parse("1n").milli_value() == 1  # ceil: any CPU at all is at least 1m
    assert Quantity.parse("1.5").as_integer() == 2
    assert Quantity.parse("0.1Ki").as_integer() == 103
    assert Quantity.parse("-1.5").as_integer() == -1  # ceiling, as documented
    assert Quantity.parse("1Gi").as_integer() == 2**30
    assert Quantity.parse("1.5").as_decimal() == Decimal("1.5")


def test_ordering_equality_and_hash_ignore_format() -> None:
    assert Quantity.parse("1Ki") == Quantity.parse("1024")
    assert hash(Quantity.parse("1Ki")) == hash(Quantity.parse("1024"))
    assert Quantity.parse("1k") < Quantity.parse("1Ki")
    assert Quantity.parse("999m") < Quantity.parse("1")
    assert Quantity.parse("2") >= Quantity.parse("2000m")
    assert max(Quantity.parse(x) for x in ["1", "1500m", "1Ki"]) == Quantity.parse("1Ki")
    assert Quantity.parse("1") != "1"


def test_arithmetic_and_format_rules() -> None:
    a, b = Quantity.parse("1Gi"), Quantity.parse("512Mi")
    assert str(a + b) == "1536Mi"
    assert str(a - b) == "512Mi"
    assert str(b - a) == "-512Mi"
    assert str(-a) == "-1Gi"
    assert (a - a).is_zero
    assert [(a - a).sign(), a.sign(), (-a).sign()] == [0, 1, -1]
    # Go's Add: the left format wins unless the left side is zero.
    assert str(Quantity.parse("1k") + Quantity.parse("24")) == "1024"
    assert (Quantity(0) + Quantity.parse("1Ki")).format is QuantityFormat.BINARY_SI
    assert str(Quantity.parse("100m") + Quantity.parse("200m")) == "300m"  # no float drift


def test_constructors_and_immutability() -> None:
    assert Quantity.from_units(Decimal("0.25")) == Quantity.parse("250m")
    assert Quantity.from_units(Fraction(1, 3)) == Quantity.parse("333333334n")
    assert Quantity.from_milli(1500) == Quantity.parse("1.5")
    q = Quantity.parse("1Gi")
    assert copy.deepcopy(q) == q
    assert str(pickle.loads(pickle.dumps(q))) == "1Gi"
    with pytest.raises(AttributeError):
        q._nanos = 1
    assert repr(q) == "Quantity('1Gi')"


# -- resource-list helpers ------------------------------------------------------------------------


def test_map_helpers() -> None:
    used = {"cpu": "1500m", "memory": "1Gi"}
    more: dict[str, int | str] = {"cpu": 1, "pods": "3"}
    assert format_map(add_maps(used, more)) == {"cpu": "2500m", "memory": "1Gi", "pods": "3"}
    assert add_maps() == {}
    diff = sub_maps({"cpu": "2", "memory": "1Gi"}, {"cpu": "500m", "pods": 2})
    assert format_map(diff) == {"cpu": "1500m", "memory": "1Gi", "pods": "-2"}
    assert format_map(max0(diff)) == {"cpu": "1500m", "memory": "1Gi", "pods": "0"}
    assert sum_quantities(["100m", "200m", 1]) == Quantity.parse("1.3")


def test_fits_and_exceeded() -> None:
    available = {"cpu": "2", "memory": "4Gi"}
    assert fits({"cpu": "2000m", "memory": "4096Mi"}, available)
    assert not fits({"cpu": "2001m"}, available)
    assert exceeded({"cpu": "3", "memory": "5Gi", "pods": 1}, available) == ["cpu", "memory", "pods"]
    assert fits({"pods": 1}, available, missing_is_unlimited=True)
    assert fits({"pods": 0}, available)
    assert fits({}, {})


def test_map_errors_name_key_and_value() -> None:
    with pytest.raises(ValueError, match=r"memory: invalid quantity '1GB'"):
        parse_map({"cpu": "1", "memory": "1GB"})


# -- pydantic field types ---------------------------------------------------------------------


class _Limits(BaseModel):
    hard: QuantityValue
    parsed: Quantity | None = None
    port: IntOrString = 80


def test_quantity_value_keeps_user_form() -> None:
    model = _Limits.model_validate({"hard": "1024Mi", "parsed": "1024Mi"})
    assert model.model_dump() == {"hard": "1024Mi", "parsed": "1Gi", "port": 80}
    assert _Limits.model_validate_json('{"hard": 2, "port": "http"}').model_dump(mode="json")["hard"] == 2


@pytest.mark.parametrize("value", [1.5, True, "1x", None, "1 Gi"])
def test_quantity_value_rejects(value: object) -> None:
    with pytest.raises(ValidationError, match="invalid quantity"):
        _Limits.model_validate({"hard": value})


def test_json_schema_is_int_or_string() -> None:
    props = _Limits.model_json_schema()["properties"]
    for name in ("hard", "port"):
        assert props[name]["x-kubernetes-int-or-string"] is True
        assert props[name]["anyOf"] == [{"type": "integer"}, {"type": "string"}]


# -- properties -----------------------------------------------------------------------------

_SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
             "e3", "E-3", "e0", "e+6", "e-9", "e12"]  # fmt: skip

quantity_text = st.builds(
    lambda sign, whole, frac, suffix: f"{sign}{whole}{frac}{suffix}",
    st.sampled_from(["", "+", "-"]),
    st.integers(min_value=0, max_value=10**15).map(str),
    st.one_of(st.just(""), st.just("."), st.text("0123456789", min_size=1, max_size=12).map(lambda s: "." + s)),
    st.sampled_from(_SUFFIXES),
)
quantities = st.one_of(
    quantity_text.map(Quantity.parse),
    st.integers(min_value=-(10**20), max_value=10**20).map(Quantity.parse),
    st.builds(Quantity, st.integers(min_value=-(10**30), max_value=10**30), st.sampled_from(QuantityFormat)),
)


@given(quantities)
def test_roundtrip_parse_str(q: Quantity) -> None:
    again = Quantity.parse(str(q))
    assert again == q
    # The canonical form of a parsed quantity is a fixed point. Not always that of a built one: a BinarySI
    # amount with no exact binary suffix prints bare ("3125000") and parses back as DecimalSI ("3125k"), as in
    # Kubernetes.
    assert str(Quantity.parse(str(again))) == str(again)


@given(quantities)
def test_canonical_form_has_no_fraction(q: Quantity) -> None:
    assert "." not in str(q)


@given(quantities, quantities)
def test_add_then_subtract(a: Quantity, b: Quantity) -> None:
    assert a + b - b == a
    assert a + b == b + a
    negated = -a
    assert -negated == a
    assert (a - b) == -(b - a)


@given(quantities, quantities)
def test_ordering_matches_decimal(a: Quantity, b: Quantity) -> None:
    da, db = a.as_decimal(), b.as_decimal()
    assert (a < b) == (da < db)
    assert (a == b) == (da == db)
    assert (a <= b) == (da <= db)
    assert a.sign() == (da > 0) - (da < 0)


@given(quantity_text)
def test_parse_matches_decimal_reference(text: str) -> None:
    """Reference: the Decimal value of the same text, rounded to nano away from zero."""
    number, suffix = text, ""
    for candidate in sorted(_SUFFIXES, key=len, reverse=True):
        if candidate and text.endswith(candidate):
            number, suffix = text[: -len(candidate)], candidate
            break
    if number.rstrip(".").lstrip("+-") == "":
        return
    factor = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal("1e3"),
              "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"),
              "E": Decimal("1e18")}  # fmt: skip
    if suffix.endswith("i"):
        scale = Decimal(1024) ** (["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].index(suffix) + 1)
    elif suffix[:1] in "eE" and suffix[1:]:
        scale = Decimal(10) ** int(suffix[1:])
    else:
        scale = factor.get(suffix, Decimal(1))
    exact = Fraction(Decimal(number if not number.endswith(".") else number[:-1])) * Fraction(scale)
    nanos = exact * 10**9
    rounded = int(nanos) if nanos == int(nanos) else int(nanos) + (1 if nanos > 0 else -1)
    assert Quantity.parse(text).nanos == rounded


@given(st.integers(min_value=-(10**18), max_value=10**18), st.integers(min_value=-(10**18), max_value=10**18))
def test_milli_value_and_integer_are_ceilings(n: int, m: int) -> None:
    q = Quantity(n * 1000 + m)
    assert q.milli_value() * 10**6 >= q.nanos > (q.milli_value() - 1) * 10**6
    assert q.as_integer() * 10**9 >= q.nanos > (q.as_integer() - 1) * 10**9


@given(st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]), quantities),
       st.dictionaries(st.sampled_from(["cpu", "memory", "gpu"]), quantities))  # fmt: skip
def test_map_algebra(a: dict[str, Quantity], b: dict[str, Quantity]) -> None:
    total = add_maps(a, b)
    back = sub_maps(total, b)
    for key in set(a) | set(b):
        assert back.get(key, Quantity(0)) == a.get(key, Quantity(0))
    assert all(q.sign() >= 0 for q in max0(back).values())
    assert fits(a, add_maps(a, max0(b)))
