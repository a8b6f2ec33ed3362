"""Regenerate the Python gRPC stubs in enclave_core.proto from protos/ (``tox -e protos``).

protoc writes imports relative to the proto root (``from enclave.snapshot.v1 import ...``); we rewrite them
to live under ``enclave_core.proto`` so the stubs import like any other module of the shared library.
``--check`` exits non-zero when the committed stubs differ from what protoc produces now.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]
PROTOS = ROOT / "protos"
TARGET = ROOT / "packages" / "enclave-core" / "src" / "enclave_core" / "proto"
_IMPORT = re.compile(r"^from enclave\.", re.MULTILINE)


def generate(out: Path) -> None:
    sources = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    args = ["protoc", f"-I{PROTOS}", f"-I{include}", f"--python_out={out}", f"--pyi_out={out}"]
    args += [f"--grpc_python_out={out}", *sources]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for path in out.rglob("*.py*"):
        path.write_text(_IMPORT.sub("from enclave_core.proto.enclave.", path.read_text()))
    for directory in [out, *[d for d in out.rglob("*") if d.is_dir()]]:
        (directory / "__init__.py").touch()


def _tree(root: Path) -> dict[str, str]:
    """The generated sources under ``root`` by relative path; bytecode caches (written beside the stubs whenever
    they are imported) are not sources."""
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    check = parser.parse_args().check
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generate(out)
        (out / "__init__.py").write_text('"""Generated gRPC stubs (hack/gen_protos.py); do not edit."""\n')
        if check:
            wanted = _tree(out)
            present = _tree(TARGET)
            if wanted != present:
                print("gRPC stubs are out of date: run `tox -e protos`", file=sys.stderr)
                return 1
            return 0
        shutil.rmtree(TARGET, ignore_errors=True)
        shutil.copytree(out, TARGET)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
