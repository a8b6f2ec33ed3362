"""Every component's flags: each has an ``ENCLAVE_*`` twin that really sets it (the chart sets either), and the
flags table of each component's README is what its parser defines (``hack/component_flags.py``)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
from collections.abc import Iterator
from types import ModuleType

import pytest

from enclave_testing.paths import repo_root


def _generator() -> ModuleType:
    path = repo_root() / "hack" / "component_flags.py"
    spec = importlib.util.spec_from_file_location("component_flags", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FLAGS = _generator()
TWIN = re.compile(r"\benv (ENCLAVE_[A-Z0-9_]+|KUBECONFIG)\b")


def _flags(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if action.option_strings and "--help" not in action.option_strings:
            yield action


def _sentinel(action: argparse.Action) -> str:
    """An environment value that must change ``action``'s default, of the type its parser builds it from."""
    if isinstance(action, argparse.BooleanOptionalAction) or action.nargs == 0:
        return "false" if action.default else "true"
    if action.choices:
        return next(str(choice) for choice in action.choices if choice != action.default)
    if isinstance(action.default, bool):
        return "false" if action.default else "true"
    if isinstance(action.default, int):
        return str(action.default + 7)
    if isinstance(action.default, float):
        return str(action.default + 7.5)
    if isinstance(action.default, list):
        return "twin=twin"
    if action.dest == "gc_thresholds":
        return "1,2,3"
    return "from-the-environment"


@pytest.mark.parametrize("component", FLAGS.COMPONENTS)
def test_every_flag_has_a_working_environment_twin(component: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [key for key in os.environ if key.startswith("ENCLAVE_")]:
        monkeypatch.delenv(name)
    plain = {action.dest: action for action in _flags(FLAGS.parser_of(component))}
    missing = [action.option_strings[0] for action in plain.values() if not TWIN.search(action.help or "")]
    assert not missing, f"enclave-{component}: flags whose help names no environment twin: {missing}"
    for dest, action in plain.items():
        twin = TWIN.search(action.help or "")
        assert twin is not None
        value = _sentinel(action)
        with monkeypatch.context() as patched:
            patched.setenv(twin.group(1), value)
            moved = {a.dest: a.default for a in _flags(FLAGS.parser_of(component, environment=True))}[dest]
        assert moved != action.default, f"enclave-{component} {action.option_strings[0]}: {twin.group(1)}={value!r}"


@pytest.mark.parametrize("component", FLAGS.COMPONENTS)
def test_the_readme_lists_the_components_flags(component: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [key for key in os.environ if key.startswith("ENCLAVE_")]:
        monkeypatch.delenv(name)
    text = FLAGS.readme(component).read_text(encoding="utf-8")
    assert FLAGS.spliced(component, text) == text, (
        f"packages/enclave-{component}/README.md lists other flags than the parser; run: python "
        "hack/component_flags.py --write"
    )
