"""``/convert``: kube-apiserver's ConversionReviews for Enclave's CRDs, answered on the admission listener.

The conversion itself is :func:`enclave_core.api.conversion.review` (pure, shared with the unit tests); this
module is the HTTP edge: parse, convert, count. Unlike admission it needs no snapshot, so it answers before
the admission snapshots arrive (a v1beta1 read must not wait for ConfigService). A body that is not a
ConversionReview is a 400; an object that cannot be converted is a 200 whose result is a Failure naming
the field, which kube-apiserver turns into an error for the client (never a partial list).
"""

from __future__ import annotations

import logging
from typing import Final

import orjson

from enclave_admission.listener import Answer
from enclave_core.api.conversion import review
from enclave_core.runtime.loopmetrics import LoopCounter

log = logging.getLogger(__name__)

PATH: Final = "/convert"
CONVERSIONS = LoopCounter(
    "enclave_admission_conversions_total", "ConversionReviews answered, by desired version and result", ["to", "result"]
)


def answer(method: str, body: bytes) -> Answer:
    """The whole exchange for one ConversionReview."""
    if method != "POST":
        return 405, orjson.dumps({"error": f"{PATH} accepts POST of a ConversionReview, not {method}"})
    try:
        parsed = orjson.loads(body)
        if not isinstance(parsed, dict):
            raise ValueError("not a JSON object")
        answered = review(parsed)
    except ValueError as err:  # orjson.JSONDecodeError is a ValueError; so is a review with no request
        CONVERSIONS.labels("", "error").inc()
        return 400, orjson.dumps({"error": f"malformed ConversionReview: {err}"})
    response = answered["response"]
    target = str((parsed.get("request") or {}).get("desiredAPIVersion", ""))
    result = "converted" if response["result"]["status"] == "Success" else "refused"
    CONVERSIONS.labels(target, result).inc()
    if result == "refused":
        log.info("conversion refused", extra={"to": target, "detail": response["result"]["message"]})
    return 200, orjson.dumps(answered)
