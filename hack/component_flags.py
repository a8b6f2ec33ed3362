"""Write (or check) the flags table of each component's README from the component's own argument parser.

Why generated: a table typed by hand goes stale the day a flag is added, and a newcomer trusts the README over
``--help``. The table sits between two markers in ``packages/<component>/README.md``; the rest of the README is
written by hand. Defaults are shown as the parser has them with no ``ENCLAVE_*`` variable set. Run::

    python hack/component_flags.py --write     # rewrite the tables
    python hack/component_flags.py --check     # exit 1 naming the stale READMEs (the unit test does this too)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COMPONENTS = ("config", "tenants", "admission", "quotas", "globalquotas", "pools", "replication", "proxy")
BEGIN = "<!-- BEGIN GENERATED FLAGS (python hack/component_flags.py --write) -->"
END = "<!-- END GENERATED FLAGS -->"


class _CapturedError(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__("captured")
        self.parser = parser


@contextlib.contextmanager
def _clean_environment() -> Iterator[None]:
    """No ``ENCLAVE_*`` variable while the parser is built: the table shows the built-in defaults."""
    saved = {key: value for key, value in os.environ.items() if key.startswith("ENCLAVE_")}
    for key in saved:
        del os.environ[key]
    try:
        yield
    finally:
        os.environ.update(saved)


def parser_of(component: str, *, environment: bool = False) -> argparse.ArgumentParser:
    """The component's parser, as its ``parse_args`` builds it (stopped before it parses anything); its defaults
    are the built-in ones unless ``environment`` lets the ``ENCLAVE_*`` variables set them."""
    module = importlib.import_module(f"enclave_{component}.__main__")

    def capture(self: argparse.ArgumentParser, *_: Any, **__: Any) -> argparse.Namespace:
        raise _CapturedError(self)

    original = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = capture  # type: ignore[assignment,method-assign]
    try:
        with contextlib.nullcontext() if environment else _clean_environment():
            module.parse_args([])
    except _CapturedError as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    raise RuntimeError(f"enclave_{component}.__main__.parse_args built no parser")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(action: argparse.Action) -> str:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "off" if action.default is False else "on"
    value = action.default
    if value is None or value == "" or value == []:
        return ""
    if callable(value):
        return ""
    if str(value) == f"{socket.gethostname()}-{os.getpid()}":  # this process's own name: differs per replica
        return "host-pid"
    return f"`{_cell(str(value))}`"


def table(component: str) -> str:
    """The markdown table of one component's flags, in the order its parser defines them."""
    rows = ["| flag | default | what it sets |", "| :-- | :-- | :-- |"]
    for action in parser_of(component)._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or "--help" in action.option_strings:
            continue
        flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
        help_text = (action.help or "").replace("%(default)s", str(action.default)).replace("%%", "%")
        rows.append(f"| {flags} | {_default(action)} | {_cell(help_text)} |")
    return "\n".join(rows)


def readme(component: str) -> Path:
    return ROOT / "packages" / f"enclave-{component}" / "README.md"


def spliced(component: str, text: str) -> str:
    """``text`` (a README) with its generated section replaced by the current table."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"{readme(component)} has no generated flags section ({BEGIN} ... {END})")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table(component)}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the tables")
    mode.add_argument("--check", action="store_true", help="exit 1 when a table is stale")
    args = parser.parse_args(argv)
    stale = []
    for component in COMPONENTS:
        path = readme(component)
        text = path.read_text(encoding="utf-8")
        wanted = spliced(component, text)
        if wanted != text:
            stale.append(str(path.relative_to(ROOT)))
            if args.write:
                path.write_text(wanted, encoding="utf-8")
    if stale and args.check:
        print("stale flags tables (run: python hack/component_flags.py --write):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
