"""A component's Settings come from the flags of the same names, with what no flag says as it is given."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from enclave_core.runtime import grpc
from enclave_core.runtime.options import parse_controller_args, settings_from


@dataclass(frozen=True)
class Settings:
    resync_seconds: float = 60.0
    concurrency: int = 16
    webhook_name: str = "default"
    fold_interval: float = 0.5


def test_fields_come_from_flags_of_their_names_and_given_values_win() -> None:
    parser = grpc.controller_parser("c", None, probe_port=1, concurrency=(16, "writes"))
    args = parse_controller_args(parser, ["--resync", "2m", "--concurrency", "3"])
    assert settings_from(Settings, args, webhook_name="given") == Settings(
        resync_seconds=120.0, concurrency=3, webhook_name="given", fold_interval=0.5
    )


def test_a_bad_concurrency_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    parser = grpc.controller_parser("c", None, probe_port=1, concurrency=(16, "writes"))
    with pytest.raises(SystemExit):
        parse_controller_args(parser, ["--concurrency", "0"])
    assert "--concurrency must be at least 1" in capsys.readouterr().err
