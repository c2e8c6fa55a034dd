"""Batch input lines (``requests.py``) and their cut into files within the endpoint's limits
(``plan.py``)."""

from __future__ import annotations

import json

import pytest

from consumer.judge.request_shape import shape_for
from consumer.replay.batch.plan import (
    MAX_BYTES_PER_FILE,
    MAX_REQUESTS_PER_FILE,
    FileLimits,
    plan_files,
)
from consumer.replay.batch.requests import BatchLine, request_line
from tests.unit.replay.batch.conftest import judge_request


def line(custom_id: str, size: int) -> BatchLine:
    return BatchLine(custom_id, b"x" * (size - 1) + b"\n")


def test_a_line_asks_what_the_synchronous_judge_asks_first() -> None:
    request = judge_request("The sky is blue.")
    for model in ("gpt-4o-mini", "o4-mini"):  # a chat model and a reasoning model
        made = request_line("verdict-1", request, model)
        assert made.data.endswith(b"\n")
        assert made.data.count(b"\n") == 1
        parsed = json.loads(made.data)
        assert parsed == {
            "custom_id": "verdict-1", "method": "POST", "url": "/v1/chat/completions",
            "body": shape_for(model).body(model, request.messages),
        }
    assert "max_completion_tokens" in json.loads(made.data)["body"]


def test_non_ascii_text_is_kept_as_utf8_on_one_line() -> None:
    made = request_line("t", judge_request("Le ciel est bleu.\u2028 \u65e5\u672c"), "m")
    assert made.data.count(b"\n") == 1  # U+2028 stays inside the JSON string
    assert "\u65e5\u672c" in made.data.decode()


def test_the_defaults_are_the_endpoints_limits() -> None:
    assert (FileLimits().max_requests, FileLimits().max_bytes) == (
        MAX_REQUESTS_PER_FILE, MAX_BYTES_PER_FILE) == (50_000, 200 * 1024 * 1024)


def test_files_are_cut_at_the_request_limit_in_order() -> None:
    lines = [line(f"r{i}", 10) for i in range(7)]
    files = plan_files(lines, FileLimits(max_requests=3))
    assert [[x.custom_id for x in f] for f in files] == [
        ["r0", "r1", "r2"], ["r3", "r4", "r5"], ["r6"]]


def test_files_are_cut_at_the_byte_limit_and_may_fill_it_exactly() -> None:
    lines = [line("a", 40), line("b", 60), line("c", 1), line("d", 100)]
    files = plan_files(lines, FileLimits(max_bytes=100))
    assert [[x.custom_id for x in f] for f in files] == [["a", "b"], ["c"], ["d"]]
    assert all(sum(len(x.data) for x in f) <= 100 for f in files)


def test_no_lines_make_no_files_and_a_line_larger_than_a_file_is_refused() -> None:
    assert plan_files([], FileLimits()) == []
    with pytest.raises(ValueError, match="batch request big is 101 bytes"):
        plan_files([line("small", 5), line("big", 101)], FileLimits(max_bytes=100))
