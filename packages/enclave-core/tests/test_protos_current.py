"""The committed gRPC stubs are what protoc makes of protos/ today (regenerate with `tox -e protos`)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_grpc_stubs_match_protos() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen_protos.py"), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
