from datetime import timedelta

import pytest

from enclave_core.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", timedelta(0)),
        ("24h", timedelta(hours=24)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(minutes=90)),
        ("500ms", timedelta(milliseconds=500)),
        ("2m3s", timedelta(minutes=2, seconds=3)),
        ("10us", timedelta(microseconds=10)),
    ],
)
def test_parse(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "24", "h", "1d", "-1h", "1h ", "1hh"])
def test_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_format_round_trips() -> None:
    for seconds in (0, 1, 59, 60, 61, 3600, 3661, 86400):
        assert parse_duration(format_duration(timedelta(seconds=seconds))) == timedelta(seconds=seconds)


def test_a_bad_duration_flag_exits_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from enclave_core.runtime.options import check_duration

    parser = argparse.ArgumentParser(prog="enclave-x")
    parser.add_argument("--token-cache-ttl", default="10s")
    assert check_duration(parser, parser.parse_args([]), "token-cache-ttl") == timedelta(seconds=10)
    with pytest.raises(SystemExit) as exit_info:
        check_duration(parser, parser.parse_args(["--token-cache-ttl", "ten"]), "token-cache-ttl")
    assert exit_info.value.code == 2
    assert "--token-cache-ttl:" in capsys.readouterr().err
