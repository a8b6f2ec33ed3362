"""The structured log line: every field a pipeline filters on, whatever the values are."""

from __future__ import annotations

import asyncio
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
    sink = (logs._Sink.component, logs._Sink.stream)
    logs.setup_logging("testing", "info")
    try:
        yield stream
    finally:
        logging.root.handlers[:], level, logging._srcfile, logging.logThreads = saved
        logging.root.setLevel(level)
        logs._Sink.component, logs._Sink.stream = sink


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


def test_hot_lines_match_the_formatter_and_wait_for_the_loop_iteration(captured: io.StringIO) -> None:
    hot = logs.HotLines("enclave_test.decisions")

    async def decide() -> str:
        hot.info("decision", {"tenant": "solar", "duration_ms": 0.5})
        hot.info("decision", {"tenant": "wind", "duration_ms": 0.7})
        before = captured.getvalue()
        await asyncio.sleep(0)  # the loop runs the scheduled flush
        return before

    before = asyncio.run(decide())
    assert before == ""  # batched: nothing written inside the iteration that decided
    first, second = lines(captured)
    logging.getLogger("enclave_test.decisions").info("decision", extra={"tenant": "solar", "duration_ms": 0.5})
    formatted = lines(captured)[-1]
    assert first.keys() == formatted.keys()
    assert {k: v for k, v in first.items() if k != "ts"} == {k: v for k, v in formatted.items() if k != "ts"}
    assert second["tenant"] == "wind"
    assert len(str(first["ts"])) == len(str(formatted["ts"]))


def test_hot_lines_outside_a_loop_are_written_at_once_and_respect_the_level(captured: io.StringIO) -> None:
    hot = logs.HotLines("enclave_test.quiet")
    hot.info("decision", {"n": 1})
    assert lines(captured)[-1]["n"] == 1
    logging.getLogger("enclave_test.quiet").setLevel(logging.WARNING)
    hot.info("decision", {"n": 2})
    assert len(lines(captured)) == 1


def test_hot_lines_with_values_orjson_cannot_encode_still_make_a_line(captured: io.StringIO) -> None:
    logs.HotLines("enclave_test.odd").info("decision", {"path": Path("/x"), "big": 2**70})
    line = lines(captured)[-1]
    assert line["path"] == "/x"
    assert line["big"] == 2**70


def test_hot_line_timestamps_are_the_formatters_milliseconds(
    captured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    hot = logs.HotLines("enclave_test.clock")
    for now in (1_700_000_000.0071, 1_700_000_000.0079, 1_700_000_000.9999, 1_700_000_001.25):
        monkeypatch.setattr("enclave_core.runtime.logs.time.time", lambda now=now: now)
        hot.info("decision", {})
    stamps = [line["ts"] for line in lines(captured)]
    assert stamps == [
        "2023-11-14T22:13:20.007+00:00",
        "2023-11-14T22:13:20.007+00:00",
        "2023-11-14T22:13:20.999+00:00",
        "2023-11-14T22:13:21.250+00:00",
    ]


def test_hot_lines_go_through_logging_when_logs_are_text(
    captured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stderr", captured)  # pytest re-captures stderr between setup and call
    logs.setup_logging("testing", "info", "text")
    logs.HotLines("enclave_test.text").info("decision", {"tenant": "solar"})
    assert captured.getvalue().rstrip().endswith("INFO testing enclave_test.text: decision")
