"""A judge request -> one line of a Batch API input file (pure).

The line's body is the body the synchronous judge sends first for the model
(``shape_for(model).body``), so the batch is asked exactly what a normal replay would ask. An
endpoint that refuses a part of that wording refuses it per line (an error line with a 400): the
caller sends such requests through the synchronous judge, which rewords them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from consumer.judge.prompt import JudgeRequest
from consumer.judge.request_shape import shape_for

CHAT_COMPLETIONS_URL: Final = "/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One request of a batch: the caller's id for it and its JSONL line (newline included)."""

    custom_id: str
    data: bytes


def request_line(custom_id: str, request: JudgeRequest, model: str) -> BatchLine:
    """The batch input line asking ``model`` what the synchronous judge would ask."""
    line = {
        "custom_id": custom_id,
        "method": "POST",
        "url": CHAT_COMPLETIONS_URL,
        "body": shape_for(model).body(model, request.messages),
    }
    text = json.dumps(line, ensure_ascii=False, separators=(",", ":"))
    return BatchLine(custom_id, (text + "\n").encode())
