"""The batch replay's requests on disk: kept once each, read back as written, and sent by the
runner straight from the spool (planned by size, an expired batch's requests read again)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from consumer.judge.result import Answered
from consumer.localjudge.batches import BatchFate
from consumer.localjudge.server import JudgeServer
from consumer.replay.batch.plan import FileLimits, plan_files, plan_ids
from consumer.replay.batch.runner import BatchApiError, BatchRunner, Polling, open_client
from consumer.replay.batch.spool import RequestSpool
from consumer.replay.batch.state import BatchState, Scope
from tests.support.fake_judge import ScriptedJudge
from tests.unit.replay.batch.conftest import MODEL, judge_line

SCOPE = Scope("llm-traces", "2026-05-01T00:00:00+00:00", None, MODEL)


@pytest.fixture
async def client(
    fake_judge: tuple[ScriptedJudge, JudgeServer],
) -> AsyncIterator[tuple[openai.AsyncOpenAI, JudgeServer]]:
    _, server = fake_judge
    server.batches.seconds_per_state = 0.0
    async with openai.AsyncOpenAI(api_key="sk-test", base_url=server.url, max_retries=0) as sdk:
        yield sdk, server


def test_lines_are_kept_once_and_read_back_as_written(tmp_path: Path) -> None:
    lines = [judge_line(f"t{i}", f"Answer {i}. [[score={i % 5 + 1}]]") for i in range(4)]
    with RequestSpool(tmp_path) as spool:
        assert [spool.add(line) for line in lines] == [True] * 4
        assert not spool.add(judge_line("t1", "another text under a known id"))
        assert list(spool) == ["t0", "t1", "t2", "t3"]
        assert [spool[cid] for cid in reversed(list(spool))] == list(reversed(lines))
        assert ("t2" in spool, "t9" in spool, len(spool)) == (True, False, 4)
        assert spool.size_bytes == sum(len(line.data) for line in lines)
    assert list(tmp_path.iterdir()) == [], "nothing left behind"


def test_planning_by_size_cuts_as_planning_the_lines_does() -> None:
    lines = [judge_line(f"t{i}", "x" * (i * 40)) for i in range(9)]
    limits = FileLimits(max_requests=3, max_bytes=3 * len(lines[4].data))
    by_lines = [[line.custom_id for line in group] for group in plan_files(lines, limits)]
    by_size = plan_ids(((line.custom_id, len(line.data)) for line in lines), limits)
    assert by_size == by_lines
    assert len(by_lines) > 3, "both limits cut"
    with pytest.raises(ValueError, match="t0 is"):
        plan_ids([("t0", 10)], FileLimits(max_bytes=9))


async def test_the_runner_sends_and_resends_from_the_spool(
    client: tuple[openai.AsyncOpenAI, JudgeServer], tmp_path: Path,
) -> None:
    sdk, server = client
    server.batches.fates.append(BatchFate(expire_after=1))
    lines = [judge_line(f"t{i}", f"Answer {i}. [[score={i % 5 + 1}]]") for i in range(5)]
    state = BatchState.open(tmp_path / "state.json", SCOPE)
    runner = BatchRunner(sdk, state, limits=FileLimits(max_requests=3),
                         polling=Polling(0.001, 0.01))
    scores: dict[str, int] = {}
    with RequestSpool(tmp_path) as spool:
        for line in lines:
            spool.add(line)
        async for finished in runner.run(spool):
            for cid, result in finished.results.items():
                assert isinstance(result, Answered)
                scores[cid] = result.answer.score
    assert scores == {f"t{i}": i % 5 + 1 for i in range(5)}
    # Three then two; the first expired after one answer and its other two went again.
    assert [(len(r.custom_ids), r.attempt, r.status) for r in state.records] == [
        (3, 1, "expired"), (2, 1, "completed"), (2, 2, "completed")]
    sent = [f.data for f in server.batches.stored("batch")]
    assert sent[2] == lines[1].data + lines[2].data, "the resent lines, as spooled"


async def test_an_endpoint_without_the_batch_api_ends_the_run_in_one_line_keeping_the_state(
    fake_judge: tuple[ScriptedJudge, JudgeServer], tmp_path: Path,
) -> None:
    _, server = fake_judge
    state = BatchState.open(tmp_path / "state.json", SCOPE)
    async with open_client("sk-test", f"{server.url}/elsewhere") as sdk:
        runner = BatchRunner(sdk, state, polling=Polling(0.001, 0.01))
        with RequestSpool(tmp_path) as spool:
            spool.add(judge_line("t0"))
            with pytest.raises(BatchApiError) as raised:
                async for _ in runner.run(spool):
                    pass
    message = str(raised.value)
    assert message.startswith("the Batch API failed (judge_http_404: ")
    assert message.endswith(f"the state in {state.path} is kept: run the same command again "
                            "to resume")
    assert "\n" not in message
    assert [r.status for r in BatchState.open(state.path, SCOPE).records] == ["planned"]
