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
