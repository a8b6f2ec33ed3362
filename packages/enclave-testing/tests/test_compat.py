"""``tox -e compat``'s arguments: what reaches each minor's pytest run (:mod:`enclave_testing.compat`)."""

from __future__ import annotations

from enclave_testing import compat


def test_minors_are_found_after_the_double_dash_that_tox_adds() -> None:
    assert compat._minors_among("", ["--minors", "1.37", "tests/integration/rules", "-x"]) == (
        "1.37",
        ["tests/integration/rules", "-x"],
    )
    assert compat._minors_among("", ["--minors=1.35,1.36", "-k", "native"]) == ("1.35,1.36", ["-k", "native"])
    assert compat._minors_among("1.36", ["-q"]) == ("1.36", ["-q"])


def test_named_paths_replace_the_default_selection_and_options_do_not() -> None:
    """``tox -e compat -- tests/integration/rules`` runs the rules suite alone (added to ``tests/integration``,
    pytest ran the whole suite)."""
    assert compat._is_path("tests/integration/rules")
    assert compat._is_path("tests/integration/rules/test_rules_native_skip.py::test_x")
    assert not compat._is_path("-x")
    assert not compat._is_path("chart")  # a -k expression's value
