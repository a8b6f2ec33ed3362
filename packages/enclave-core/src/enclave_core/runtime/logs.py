"""Structured logs: one JSON object per line, so a log pipeline can filter decisions by tenant or reason.

The admission server writes one line per decision, thousands a second, so a line must cost microseconds:
the formatter encodes with orjson, and :func:`setup_logging` turns off what the stdlib collects for every
record but no line of ours prints (the caller's frame, thread, process and task names). Measured on the
admission decision line (min of repeats, side by side): 24 µs with ``json`` and the defaults, 15 µs now.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

# Attributes every LogRecord has; anything else passed through ``extra=`` is a structured field.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS


class JsonFormatter(logging.Formatter):
    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "component": self.component,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD:
                entry[key] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        try:
            return orjson.dumps(entry, default=str, option=_ORJSON_OPTIONS).decode()
        except (TypeError, orjson.JSONEncodeError):  # e.g. an int beyond 64 bits: slower, never lost
            return json.dumps(entry, default=str)


def setup_logging(component: str, level: str = "info", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(component))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s {component} %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Neither format prints the caller's file and line, thread, process or task: skip collecting them
    # (the logging HOWTO's "Optimization" section); the caller lookup alone walks the stack on every record.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    if hasattr(logging, "logAsyncioTasks"):  # Python 3.12+
        logging.logAsyncioTasks = False
    # Client libraries are chatty at info; their warnings still come through.
    for noisy in ("kubernetes", "urllib3", "aiohttp.access", "kopf.objects", "grpc"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
