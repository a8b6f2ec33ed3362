"""The base of every snapshot payload model: tolerant of fields it does not know.

Publishers and subscribers are upgraded one at a time, so during a rolling upgrade an admission replica one
release behind reads snapshots from a newer publisher. The payload models reuse API models that forbid
unknown fields (right for what users write, wrong for what a newer peer sends), so parsing a payload ignores
unknown fields at every depth: the newer field is dropped, the rest is used, and nothing is rejected for it.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel
from pydantic.config import ExtraValues


class SnapshotPayload(BaseModel):
    """Parse with ``model_validate_json`` as usual: unknown fields are ignored unless ``extra`` says otherwise."""

    @classmethod
    def model_validate_json(
        cls,
        json_data: str | bytes | bytearray,
        *,
        strict: bool | None = None,
        extra: ExtraValues | None = "ignore",
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        return super().model_validate_json(
            json_data, strict=strict, extra=extra, context=context, by_alias=by_alias, by_name=by_name
        )
