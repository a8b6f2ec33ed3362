"""Builds enclave-admission with its per-review modules compiled by mypyc.

Every AdmissionReview runs the listener, the parsing of the review, the decision and its answer; compiled,
that code costs about a quarter less CPU per review (docs/benchmarks.md). mypyc compiles these modules from
their type annotations and checks those annotations at run time, which is why the tests run against this
build (tox installs the wheel). The sources stay plain Python and behave the same uncompiled: an editable
install (development) never compiles, since a compiled module would shadow later edits of its source,
``ENCLAVE_MYPYC=0`` builds a plain wheel, and so does a build that finds no C compiler or Python headers
(with a warning; the server then reports ``enclave_admission_build_info{compiled="false"}``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

COMPILED = [
    "review.py",
    "listener.py",
    "connection.py",
    "server.py",
    "state.py",
    "metadata.py",
    "namespaces/assignment.py",
    "namespaces/mutation.py",
    "namespaces/validation.py",
    "rules/matching.py",
    "rules/compiled.py",
    "rules/engine.py",
    "rules/exempt.py",
    "rules/metadata.py",
    "rules/services.py",
    "rules/ingress.py",
    "rules/network.py",
    "rules/storage.py",
    "rules/workloads/__init__.py",
    "rules/workloads/podspec.py",
    "rules/workloads/items.py",
    "rules/workloads/judges.py",
    "rules/workloads/budgets.py",
    "rules/workloads/plan.py",
    "rules/workloads/mutation.py",
    "rules/validation.py",
    "rules/mutation.py",
]
"""Modules on the path of every namespace review; the rest of the package stays interpreted."""


def ext_modules() -> list[object]:
    if os.environ.get("ENCLAVE_MYPYC", "1") == "0" or {"editable_wheel", "develop"} & set(sys.argv):
        return []
    from mypyc.build import mypycify

    # Other packages (enclave-core included) are seen as untyped: their objects are Python objects to compiled
    # code either way, following them costs minutes of analysis, and `tox -e lint` type-checks them. No config
    # file: the repository's settings load the pydantic plugin, which the build environment lacks.
    options = ["--config-file=", "--ignore-missing-imports", "--follow-imports=skip"]
    sources = [str(Path("src/enclave_admission") / module) for module in COMPILED]
    return list(mypycify([*options, *sources], opt_level="3"))


class OptionalBuildExt(build_ext):  # type: ignore[misc]  # setuptools is untyped here
    """Compiled modules are an optimisation: without a working compiler the wheel is plain Python."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # setuptools/distutils raise several unrelated types for a missing toolchain
            self._plain(err)

    def _plain(self, err: Exception) -> None:
        # all or nothing: a module's shim without the shared library mypyc puts the code in cannot be imported
        for ext in self.extensions:
            Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
        self.extensions: list[Any] = []
        print(f"warning: enclave-admission is built without mypyc-compiled modules: {err}", file=sys.stderr)


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
