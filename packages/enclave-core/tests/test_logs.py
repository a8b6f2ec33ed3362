"""The structured log line: every field a pipeline filters on, whatever the values are."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from enclave_core.runtime import logs


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    saved = (logging.root.handlers[:], logging.root.level, logging._srcfile, logging.logThreads)
    logs.setup_logging("testing", "debug")
    try:
        yield stream
    finally:
        logging.root.handlers[:], level, logging._srcfile, logging.logThreads = saved
        logging.root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_carries_the_component_the_message_and_every_extra_field(captured: io.StringIO) -> None:
    logging.getLogger("enclave_test.decisions").info(
        "decision %s", "made", extra={"tenant": "solar", "dry_run": True, "duration_ms": 0.25, "path": Path("/x")}
    )
    (line,) = lines(captured)
    assert line["component"] == "testing"
    assert line["logger"] == "enclave_test.decisions"
    assert line["level"] == "info"
    assert line["msg"] == "decision made"
    assert (line["tenant"], line["dry_run"], line["duration_ms"], line["path"]) == ("solar", True, 0.25, "/x")
    assert str(line["ts"]).endswith("+00:00")


def test_values_orjson_cannot_encode_still_make_a_line(captured: io.StringIO) -> None:
    log = logging.getLogger("enclave_test")
    log.info("big", extra={"count": 2**70, "keys": {1: "one"}})
    (first,) = lines(captured)
    assert first["count"] == 2**70
    assert first["keys"] == {"1": "one"}


def test_an_exception_is_one_line_with_its_traceback(captured: io.StringIO) -> None:
    try:
        raise ValueError("broken snapshot")
    except ValueError:
        logging.getLogger("enclave_test").exception("failed")
    (line,) = lines(captured)
    assert "ValueError: broken snapshot" in str(line["error"])


def test_records_skip_what_no_line_prints(captured: io.StringIO) -> None:
    assert logging._srcfile is None  # no stack walk per record
    assert logging.logThreads is False
    logging.getLogger("enclave_test").info("cheap")
    (line,) = lines(captured)
    assert "thread" not in line
    assert "pathname" not in line
