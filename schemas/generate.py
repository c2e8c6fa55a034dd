"""Write the JSON Schema files beside the models: ``python -m schemas.generate``."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from schemas.judge import JudgeAnswer
from schemas.trace import TraceEvent
from schemas.verdict import VerdictEvent

SCHEMA_DIR = Path(__file__).parent
MODELS: dict[str, type[BaseModel]] = {
    "trace.schema.json": TraceEvent,
    "verdict.schema.json": VerdictEvent,
    "judge.schema.json": JudgeAnswer,
}


def render(model: type[BaseModel]) -> str:
    """The committed text of one model's JSON Schema."""
    return json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    """Regenerate every schema file."""
    for name, model in MODELS.items():
        (SCHEMA_DIR / name).write_text(render(model), encoding="utf-8")
        print(SCHEMA_DIR / name)


if __name__ == "__main__":
    main()
