"""The committed JSON Schema files match the pydantic models."""

from __future__ import annotations

import pytest

from schemas.generate import MODELS, SCHEMA_DIR, render


@pytest.mark.parametrize("name", sorted(MODELS))
def test_committed_schema_matches_model(name: str) -> None:
    committed = (SCHEMA_DIR / name).read_text(encoding="utf-8")
    assert committed == render(MODELS[name]), (
        f"schemas/{name} drifted from its model: run `python -m schemas.generate`"
    )


def test_trace_schema_names_the_contract_fields() -> None:
    properties = MODELS["trace.schema.json"].model_json_schema()["properties"]
    assert {"trace_id", "output", "input", "retrieved_documents", "expected_output",
            "project_id", "timestamp", "metadata"} <= set(properties)
