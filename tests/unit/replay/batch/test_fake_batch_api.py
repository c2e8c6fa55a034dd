"""The fake judge's Batch API (``consumer/localjudge/batches.py``) through the real openai SDK:
what a client sees of a batch's states, files, errors and counts, as OpenAI shows them."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from openai.types import Batch

from consumer.localjudge.batches import BatchFate
from consumer.localjudge.server import MAX_REQUEST_BYTES, JudgeServer
from consumer.replay.batch.requests import CHAT_COMPLETIONS_URL
from tests.support.fake_judge import ScriptedJudge
from tests.unit.replay.batch.conftest import BatchApi, ManualClock, judge_line


def jsonl(lines: list[Any]) -> bytes:
    return b"".join(
        (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n"
        for line in lines
    )


async def submit(api: BatchApi, data: bytes) -> Batch:
    uploaded = await api.client.files.create(file=("in.jsonl", data), purpose="batch")
    return await api.client.batches.create(
        input_file_id=uploaded.id, endpoint=CHAT_COMPLETIONS_URL, completion_window="24h"
    )


async def lines_of(api: BatchApi, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    content = await api.client.files.content(file_id)
    return [json.loads(line) for line in content.text.splitlines()]


def answers(*outputs: str) -> bytes:
    return b"".join(judge_line(f"r{i}", output).data for i, output in enumerate(outputs))


@pytest.fixture
def clock(batch_api: BatchApi) -> ManualClock:
    clock = ManualClock()
    batch_api.batches.clock = clock
    batch_api.batches.seconds_per_state = 10.0
    return clock


async def test_a_batch_goes_through_its_states_and_counts_its_requests(
    batch_api: BatchApi, clock: ManualClock
) -> None:
    api = batch_api
    batch = await submit(api, answers("one", "two", "three", "four"))
    assert batch.status == "validating"
    seen = []
    for at in (9.9, 10, 15, 20, 29.9, 30):
        clock.now = 1_800_000_000.0 + at
        batch = await api.client.batches.retrieve(batch.id)
        assert batch.request_counts is not None
        seen.append((batch.status, batch.request_counts.completed, batch.request_counts.total))
    assert seen == [
        ("validating", 0, 0),
        ("in_progress", 0, 4),
        ("in_progress", 2, 4),  # half the state's time: half the requests answered
        ("finalizing", 4, 4),
        ("finalizing", 4, 4),
        ("completed", 4, 4),
    ]
    assert (batch.in_progress_at, batch.finalizing_at, batch.completed_at) == (
        1_800_000_010, 1_800_000_020, 1_800_000_030)
    assert batch.expires_at == 1_800_000_000 + 24 * 3600
    assert batch.error_file_id is None
    output = await lines_of(api, batch.output_file_id)
    assert [line["custom_id"] for line in output] == ["r0", "r1", "r2", "r3"]
    assert {line["response"]["status_code"] for line in output} == {200}
    assert all(line["error"] is None and line["id"].startswith("batch_req_") for line in output)
    assert batch.usage is not None
    spent = sum(line["response"]["body"]["usage"]["total_tokens"] for line in output)
    assert batch.usage.total_tokens == spent > 0
    output_file = await api.client.files.retrieve(batch.output_file_id or "")
    assert (output_file.purpose, output_file.filename) == ("batch_output",
                                                           f"{batch.id}_output.jsonl")
    assert len(api.judge.calls) == 4  # each line answered once, through the same responder


async def test_each_line_is_answered_as_the_chat_route_answers_it(batch_api: BatchApi) -> None:
    api = batch_api
    batch = await submit(api, answers(
        "[[score=2]] Mostly made up.", "[[status=500]]", "[[context_length]]", "[[hang]]",
        "[[status=429 retry_after=3]]"))
    batch = await api.client.batches.retrieve(batch.id)
    assert batch.status == "completed"
    assert batch.request_counts is not None
    assert (batch.request_counts.completed, batch.request_counts.failed) == (1, 4)
    [answered] = await lines_of(api, batch.output_file_id)
    content = answered["response"]["body"]["choices"][0]["message"]["content"]
    assert json.loads(content)["score"] == 2
    errors = {line["custom_id"]: line for line in await lines_of(api, batch.error_file_id)}
    assert errors["r1"]["response"]["status_code"] == 500
    assert errors["r1"]["response"]["body"]["error"]["type"] == "server_error"
    assert errors["r2"]["response"]["status_code"] == 400
    assert errors["r2"]["response"]["body"]["error"]["code"] == "context_length_exceeded"
    assert errors["r2"]["error"] is None  # an HTTP error is in the response, as OpenAI writes it
    assert errors["r3"]["response"] is None
    assert errors["r3"]["error"]["code"] == "request_timeout"
    assert errors["r4"]["response"]["status_code"] == 429


async def test_a_batch_that_expires_keeps_its_answers_and_lists_the_rest(
    batch_api: BatchApi, clock: ManualClock
) -> None:
    api = batch_api
    api.batches.fates.append(BatchFate(expire_after=2))
    batch = await submit(api, answers("a", "b", "c", "d", "e"))
    clock.now += 20
    batch = await api.client.batches.retrieve(batch.id)
    assert batch.status == "expired"
    assert batch.expired_at == batch.expires_at == 1_800_000_020
    assert batch.request_counts is not None
    assert (batch.request_counts.completed, batch.request_counts.total) == (2, 5)
    assert [line["custom_id"] for line in await lines_of(api, batch.output_file_id)] == [
        "r0", "r1"]
    expired = await lines_of(api, batch.error_file_id)
    assert [(line["custom_id"], line["error"]["code"]) for line in expired] == [
        ("r2", "batch_expired"), ("r3", "batch_expired"), ("r4", "batch_expired")]
    assert all(line["response"] is None for line in expired)
    # The fate was this batch's only: the next one completes.
    later = await submit(api, answers("f"))
    clock.now += 30
    assert (await api.client.batches.retrieve(later.id)).status == "completed"


async def test_an_invalid_file_fails_validation_with_one_error_per_bad_line(
    batch_api: BatchApi,
) -> None:
    api = batch_api
    good = json.loads(judge_line("a").data)
    data = jsonl([
        good,
        b"{not json",
        {**good, "custom_id": "b", "url": "/v1/embeddings"},
        good,  # a duplicate custom id
        {k: v for k, v in good.items() if k != "body"} | {"custom_id": "c"},
        {**good, "custom_id": "d", "body": {**good["body"], "model": "another-model"}},
    ])
    batch = await api.client.batches.retrieve((await submit(api, data)).id)
    assert batch.status == "failed"
    assert batch.failed_at is not None
    assert batch.in_progress_at is None
    assert batch.errors is not None
    assert batch.errors.data is not None
    assert [(e.line, e.code) for e in batch.errors.data] == [
        (2, "invalid_json_line"), (3, "mismatched_endpoint"), (4, "duplicate_custom_id"),
        (5, "missing_required_parameter"), (6, "mismatched_model")]
    assert batch.output_file_id is None
    assert batch.error_file_id is None
    assert api.judge.calls == []  # nothing of a failed batch is answered


async def test_a_fate_fails_a_valid_batch_as_the_enqueued_token_limit_does(
    batch_api: BatchApi,
) -> None:
    api = batch_api
    api.batches.fates.append(BatchFate(fail_validation=True))
    batch = await api.client.batches.retrieve((await submit(api, answers("a"))).id)
    assert batch.status == "failed"
    assert batch.errors is not None
    assert batch.errors.data is not None
    [error] = batch.errors.data
    assert error.code == "token_limit_exceeded"
    assert "Enqueued token limit reached for scripted-judge" in (error.message or "")


async def test_files_over_the_endpoint_limits_are_refused(batch_api: BatchApi) -> None:
    api = batch_api
    api.batches.max_requests_per_file = 2
    batch = await api.client.batches.retrieve((await submit(api, answers("a", "b", "c"))).id)
    assert batch.status == "failed"
    assert batch.errors is not None
    assert batch.errors.data is not None
    assert [e.code for e in batch.errors.data] == ["too_many_tasks"]
    api.batches.max_file_bytes = 100
    with pytest.raises(openai.BadRequestError, match="too large"):
        await submit(api, answers("a"))
    empty = await api.client.batches.retrieve((await submit(api, b"")).id)
    assert empty.errors is not None
    assert empty.errors.data is not None
    assert [e.code for e in empty.errors.data] == ["empty_file"]


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
async def test_an_upload_is_stored_byte_for_byte_through_either_transport(
    fake_judge: tuple[ScriptedJudge, JudgeServer], transport: str
) -> None:
    _, server = fake_judge
    options: dict[str, Any] = {"http_client": openai.DefaultAioHttpClient()} \
        if transport == "aiohttp" else {}
    # CRLFs, dashes and a line that looks like a multipart delimiter are file content.
    data = answers("a") + b'{"x": "\r\n--not-the-boundary\r\n\r\n"}\r\n' * 3
    async with openai.AsyncOpenAI(api_key="k", base_url=server.url, max_retries=0,
                                  **options) as client:
        uploaded = await client.files.create(file=("in.jsonl", data), purpose="batch")
        assert (uploaded.bytes, uploaded.purpose, uploaded.filename) == (
            len(data), "batch", "in.jsonl")
        assert (await client.files.content(uploaded.id)).content == data
        assert (await client.files.retrieve(uploaded.id)).id == uploaded.id


async def test_a_batch_file_above_the_chat_routes_body_limit_is_taken(
    batch_api: BatchApi,
) -> None:
    big = b'{"custom_id": "padding"}' + b" " * (MAX_REQUEST_BYTES + 1024) + b"\n"
    uploaded = await batch_api.client.files.create(file=("big.jsonl", big), purpose="batch")
    assert uploaded.bytes == len(big)


async def test_cancelling_keeps_the_answers_so_far(
    batch_api: BatchApi, clock: ManualClock
) -> None:
    api = batch_api
    batch = await submit(api, answers("a", "b", "c", "d"))
    clock.now += 15  # in progress, two of four answered
    batch = await api.client.batches.cancel(batch.id)
    assert batch.status == "cancelling"
    clock.now += 10
    batch = await api.client.batches.retrieve(batch.id)
    assert batch.status == "cancelled"
    assert (batch.cancelling_at, batch.cancelled_at) == (1_800_000_015, 1_800_000_025)
    assert len(await lines_of(api, batch.output_file_id)) == 2
    cancelled = await lines_of(api, batch.error_file_id)
    assert {line["error"]["code"] for line in cancelled} == {"batch_cancelled"}
    with pytest.raises(openai.ConflictError, match="status 'cancelled'"):
        await api.client.batches.cancel(batch.id)


async def test_a_fate_cancels_a_batch_after_some_answers(batch_api: BatchApi) -> None:
    api = batch_api
    api.batches.fates.append(BatchFate(cancel_after=1))
    batch = await api.client.batches.retrieve((await submit(api, answers("a", "b", "c"))).id)
    assert batch.status == "cancelled"
    assert batch.request_counts is not None
    assert batch.request_counts.completed == 1
    assert len(await lines_of(api, batch.error_file_id)) == 2


async def test_unknown_ids_and_bad_requests_are_refused_in_openai_shapes(
    batch_api: BatchApi,
) -> None:
    api = batch_api
    with pytest.raises(openai.NotFoundError, match="No batch found"):
        await api.client.batches.retrieve("batch_nope")
    with pytest.raises(openai.NotFoundError, match="No such File"):
        await api.client.files.content("file-nope")
    with pytest.raises(openai.BadRequestError, match=r"Must be \.jsonl"):
        await api.client.files.create(file=("in.txt", b"{}\n"), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="input_file_id"):
        await api.client.batches.create(
            input_file_id="file-nope", endpoint=CHAT_COMPLETIONS_URL, completion_window="24h")
    uploaded = await api.client.files.create(file=("in.jsonl", answers("a")), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        await api.client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h")
    assert (await api.client.files.content(uploaded.id)).content == answers("a")
    assert api.batches.created == []


async def test_batches_are_listed_newest_first_page_by_page(batch_api: BatchApi) -> None:
    api = batch_api
    made = [(await submit(api, answers(str(i)))).id for i in range(3)]
    first = await api.client.batches.list(limit=2)
    assert [b.id for b in first.data] == made[:0:-1]
    assert first.has_more
    every = [b.id async for b in api.client.batches.list(limit=2)]
    assert every == made[::-1]
